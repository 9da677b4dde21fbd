// Reads a bbolt database file (any page size, version 2): picks the meta
// page as bbolt does (the valid one with the higher txid; bbolt's
// db.go/meta()), then walks buckets and keys in key order.
//
// Every read is bounds-checked against the file, so a truncated, bit-flipped
// or hostile file gives an error, never a crash, an out-of-bounds read or an
// endless walk. What it checks: meta magic, version, FNV-64a checksum, page
// size (a power of two, 512..65536); file length >= high-water pgid * page
// size; every page id below the high-water mark and not a meta page; the id
// a page records for itself; page flags; element counts and key/value
// spans inside their page (and overflow); keys strictly increasing within a
// bucket; every key inside the range its branch pages give it (what bbolt's
// lookups rely on); a bound on tree depth and on bucket nesting (64 each); no
// page read twice in one walk or lookup (so a bucket whose root is the
// root bucket's page, or another bucket's, is refused rather than read as
// that bucket's contents: such a file once restored as 0 keys); the total
// number of elements visited no more than the file could hold. Bit flips inside values are not detectable by
// the bbolt format itself: etcd's snapshots carry a sha256 trailer for that
// (snapshot_file.h).
//
// Memory: one page (with its overflow) per tree level being walked, per
// open bucket, and a bit per page of the file (meta.pgid / 8 bytes) a walk.
// The file is read with pread, not mapped.
//
// Errors: DataLoss with a message starting "bbolt: " and naming the file and
// what is wrong; Internal for I/O errors. A visitor's error stops the walk
// and is returned as is.
//
// Thread-safety: a Reader is immutable after open(); walks from several
// threads at once are fine (pread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bbolt/format.h"
#include "common/error.h"

namespace etcdq::bbolt {

// Receives a walk over the whole file, in key order: bucket_begin, then the
// bucket's keys and nested buckets in key order, then bucket_end. Views are
// valid only during the call.
class Visitor {
 public:
  virtual ~Visitor() = default;
  // depth is 1 for a top-level bucket.
  virtual Error bucket_begin(int depth, std::string_view name) = 0;
  virtual Error key_value(std::string_view key, std::string_view value) = 0;
  virtual Error bucket_end() = 0;
};

class Reader {
 public:
  Reader() = default;
  ~Reader();
  Reader(Reader&& o) noexcept;
  Reader& operator=(Reader&& o) noexcept;
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Opens `path` and validates its meta pages. `db_bytes` is how much of the
  // file is the database (0: all of it; an etcd snapshot's length less its
  // 32-byte sha256 trailer).
  Error open(const std::string& path, uint64_t db_bytes = 0);

  // The meta page in use.
  const Meta& meta() const { return meta_; }
  // The bytes of tree pages read so far (a page read twice counts twice),
  // and of the database's pages in all (meta().pgid pages): how far a
  // caller that reads most of the file is. Not thread-safe (as the reads).
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t pages_bytes() const { return meta_.pgid * meta_.page_size; }

  // Walks every bucket, key and value.
  Error walk(Visitor& v) const;

  // Calls fn for each key/value directly in the bucket at `path` (bucket
  // names from the top), in key order; nested buckets inside it are skipped.
  // NotFound if a bucket on the path does not exist.
  Error for_each(const std::vector<std::string>& path,
                 const std::function<Error(std::string_view key, std::string_view value)>& fn) const;

 private:
  struct Bucket;
  class Scan;
  Error read_page(uint64_t pgid, std::string* buf) const;
  Error corrupt(const std::string& what) const;

  int fd_ = -1;
  std::string path_;
  uint64_t db_bytes_ = 0;
  Meta meta_;
  mutable uint64_t bytes_read_ = 0;
};

}  // namespace etcdq::bbolt
