// Peer.FetchSnapshot's pairs, packed into one byte string a chunk
// (SnapshotChunk.packed) instead of a protobuf message a pair: the sender
// appends each (column family, key, value) with one copy, and the installer
// reads them in place, without an allocation a pair. With a message a pair
// the two ends spent most of an install's transfer encoding and parsing
// (bench/RESULTS.md, "Catch-up (3 members)", fourth pass).
//
// Layout, a record a pair, back to back (little endian):
//   u8   column family (storage::Cf; checked by the installer, not here)
//   u32  key length
//   u32  value length
//   key bytes, then value bytes
// A chunk holds whole records only.
//
// Thread-safety: none needed (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace etcdq::state_pairs {

// Bytes a record adds besides its key and value.
inline constexpr size_t kRecordOverhead = 9;

// Appends one record to `out`. Keys and values above 4 GiB are not
// supported (etcd's own bound on a value is far below: --max-request-bytes).
void append(std::string* out, uint32_t cf, std::string_view key, std::string_view value);

// `crc` extended over `bytes`: zlib's crc32 (the IEEE polynomial, as
// Go's hash/crc32.ChecksumIEEE), 0 for no bytes. A whole stream's
// checksum is every chunk's `packed` fed in order (SnapshotChunk.
// packed_crc32). zlib's, not common/crc32c.h's: 6.8 GB/s against that
// table's byte a step (and RocksDB's crc32c 1.6 GB/s) on this host.
uint32_t checksum(uint32_t crc, std::string_view bytes);

// Calls fn(cf, key, value) for each record of `packed` in order, the views
// pointing into `packed`; stops at fn's first error and returns it. A
// record that runs past the end (a length that does not fit what is left,
// or a partial header) is errors::internal("malformed state chunk: ...")
// and fn is not called for it. `packed` comes from a peer: nothing in it is
// trusted beyond these bounds.
template <typename Fn>
Error for_each(std::string_view packed, Fn&& fn);

namespace detail {
inline uint32_t read_u32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}
Error malformed(size_t offset, const char* what);
}  // namespace detail

template <typename Fn>
Error for_each(std::string_view packed, Fn&& fn) {
  size_t at = 0;
  while (at < packed.size()) {
    const size_t left = packed.size() - at;
    if (left < kRecordOverhead) return detail::malformed(at, "a partial record header");
    const char* p = packed.data() + at;
    const uint32_t cf = static_cast<unsigned char>(p[0]);
    const uint64_t key_len = detail::read_u32(p + 1);
    const uint64_t value_len = detail::read_u32(p + 5);
    if (key_len + value_len > left - kRecordOverhead) return detail::malformed(at, "a record past the end");
    std::string_view key(p + kRecordOverhead, key_len);
    std::string_view value(p + kRecordOverhead + key_len, value_len);
    if (Error e = fn(cf, key, value)) return e;
    at += kRecordOverhead + key_len + value_len;
  }
  return {};
}

}  // namespace etcdq::state_pairs
