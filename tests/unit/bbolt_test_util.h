// Helpers shared by the bbolt tests: a temp dir, a visitor that records a
// walk, and file byte surgery.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bbolt/reader.h"
#include "bbolt/writer.h"
#include "test_files.h"

namespace etcdq::bbolt::testing {

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("etcdq-bbolt-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A walk as lines: "B name", "P key=value", "E".
class Recorder : public Visitor {
 public:
  std::vector<std::string> lines;
  Error bucket_begin(int depth, std::string_view name) override {
    lines.push_back("B" + std::to_string(depth) + " " + std::string(name));
    return {};
  }
  Error key_value(std::string_view k, std::string_view v) override {
    lines.push_back("P " + std::string(k) + "=" + std::string(v));
    return {};
  }
  Error bucket_end() override {
    lines.push_back("E");
    return {};
  }
};

// A visitor that only counts, for walks of corrupt files.
class Counter : public Visitor {
 public:
  uint64_t keys = 0;
  Error bucket_begin(int, std::string_view) override { return {}; }
  Error key_value(std::string_view, std::string_view) override {
    ++keys;
    return {};
  }
  Error bucket_end() override { return {}; }
};

using test_util::read_all;
using test_util::write_all;

// Opens and walks `path`; the first error, or OK.
inline Error open_and_walk(const std::string& path, uint64_t db_bytes = 0) {
  Reader r;
  if (Error e = r.open(path, db_bytes)) return e;
  Counter c;
  return r.walk(c);
}

}  // namespace etcdq::bbolt::testing
