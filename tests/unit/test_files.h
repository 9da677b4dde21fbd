// Whole-file reads and writes for tests (bytes, no encoding).
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace etcdq::test_util {

// The file's bytes; empty if it cannot be read.
inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces the file's contents with `data`.
inline void write_all(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), std::streamsize(data.size()));
}

}  // namespace etcdq::test_util
