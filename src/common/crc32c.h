// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as Go's
// hash/crc32 with crc32.MakeTable(crc32.Castagnoli) computes it: etcd's Hash
// and HashKV (etcd 3.4 mvcc/backend/backend.go Hash, mvcc/kvstore.go
// HashByRev) write bytes into one such hash in order, and Sum32 is value().
//
// Table-driven, one byte at a time (its speed: bench/RESULTS.md, "Measurements moved from headers").
// Thread-safety: an object per thread; the table is built once, thread-safely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace etcdq {

class Crc32c {
 public:
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  uint32_t value() const { return ~state_; }

 private:
  uint32_t state_ = 0xFFFFFFFFu;
};

}  // namespace etcdq
