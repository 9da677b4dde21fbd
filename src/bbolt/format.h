// bbolt's on-disk layout (version 2), as the reader and writer share it.
// Source of truth: bbolt's internal/common/{page,meta,bucket,types}.go
// (v1.3.6 is what etcd 3.4 links; the layout has not changed since).
//
// A file is an array of pages of `page_size` bytes, numbered by pgid. Pages 0
// and 1 are meta pages (the one with the higher txid that validates wins);
// every other page is a branch, leaf or freelist page. A page may span
// 1 + overflow consecutive pages. All integers are little-endian (bbolt
// writes its structs in host order; every platform etcd ships on is
// little-endian).
//
//   page header (16 B): id u64 | flags u16 | count u16 | overflow u32
//   leaf element (16 B): flags u32 | pos u32 | ksize u32 | vsize u32
//   branch element (16 B): pos u32 | ksize u32 | pgid u64
//   (pos counts from the element's own first byte to its key; a leaf's
//    value follows its key)
//   meta (64 B, after the page header): magic u32 | version u32 |
//    page_size u32 | flags u32 | root bucket (root pgid u64, sequence u64) |
//    freelist pgid u64 | high-water pgid u64 | txid u64 | checksum u64
//    (FNV-64a of the 56 bytes before it)
//   bucket value (16 B): root pgid u64 | sequence u64; root 0 means an
//    inline bucket whose leaf page follows in the value itself.
//
// Header-only; no state. Thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace etcdq::bbolt {

inline constexpr uint32_t kMagic = 0xED0CDAED;
inline constexpr uint32_t kVersion = 2;
inline constexpr uint64_t kNoFreelist = ~uint64_t{0};  // bbolt's PgidNoFreelist

inline constexpr uint16_t kBranchPage = 0x01;
inline constexpr uint16_t kLeafPage = 0x02;
inline constexpr uint16_t kMetaPage = 0x04;
inline constexpr uint16_t kFreelistPage = 0x10;
inline constexpr uint32_t kBucketLeafFlag = 0x01;  // leaf element is a nested bucket

inline constexpr size_t kPageHeaderSize = 16;
inline constexpr size_t kElementSize = 16;  // leaf and branch alike
inline constexpr size_t kMetaSize = 64;
inline constexpr size_t kMetaChecksumOffset = 56;
inline constexpr size_t kBucketHeaderSize = 16;

// bbolt's limits (bucket.go MaxKeySize, MaxValueSize).
inline constexpr size_t kMaxKeySize = 32768;
inline constexpr size_t kMaxValueSize = (size_t{1} << 31) - 2;

inline uint16_t get16(const char* p) {
  auto u = reinterpret_cast<const unsigned char*>(p);
  return uint16_t(u[0] | (u[1] << 8));
}
inline uint32_t get32(const char* p) {
  auto u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t(u[0]) | uint32_t(u[1]) << 8 | uint32_t(u[2]) << 16 | uint32_t(u[3]) << 24;
}
inline uint64_t get64(const char* p) { return uint64_t(get32(p)) | uint64_t(get32(p + 4)) << 32; }

inline void put16(char* p, uint16_t v) {
  p[0] = char(v);
  p[1] = char(v >> 8);
}
inline void put32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = char(v >> (8 * i));
}
inline void put64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = char(v >> (8 * i));
}

// FNV-64a, the meta page checksum (Go's hash/fnv New64a).
inline uint64_t fnv64a(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// The meta fields, decoded.
struct Meta {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint32_t page_size = 0;
  uint32_t flags = 0;
  uint64_t root = 0;           // root bucket's root page
  uint64_t root_sequence = 0;
  uint64_t freelist = 0;       // freelist page, or kNoFreelist
  uint64_t pgid = 0;           // high-water mark: pages [0, pgid) are in use
  uint64_t txid = 0;
  uint64_t checksum = 0;
};

// `p` points at the meta body (after the page header), kMetaSize bytes.
inline Meta decode_meta(const char* p) {
  Meta m;
  m.magic = get32(p);
  m.version = get32(p + 4);
  m.page_size = get32(p + 8);
  m.flags = get32(p + 12);
  m.root = get64(p + 16);
  m.root_sequence = get64(p + 24);
  m.freelist = get64(p + 32);
  m.pgid = get64(p + 40);
  m.txid = get64(p + 48);
  m.checksum = get64(p + 56);
  return m;
}

// Writes `m` (checksum computed here) into the kMetaSize bytes at `p`.
inline void encode_meta(const Meta& m, char* p) {
  put32(p, m.magic);
  put32(p + 4, m.version);
  put32(p + 8, m.page_size);
  put32(p + 12, m.flags);
  put64(p + 16, m.root);
  put64(p + 24, m.root_sequence);
  put64(p + 32, m.freelist);
  put64(p + 40, m.pgid);
  put64(p + 48, m.txid);
  put64(p + 56, fnv64a(std::string_view(p, kMetaChecksumOffset)));
}

}  // namespace etcdq::bbolt
