// Big-endian 64-bit integers: the byte order in which keys sort by number
// (etcd's revision keys, our column families' revision and lease keys) and
// in which etcd's bbolt values store them.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace etcdq {

// Appends v's 8 bytes, most significant first.
inline void put_be64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 7; i >= 0; --i) {
    b[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  out->append(b, 8);
}

// Reads the 8 bytes at p (the caller checks that there are 8).
inline uint64_t get_be64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace etcdq
