// Writes a bbolt database file in one pass, from buckets and keys given in
// order: a bulk loader, not a database. The result opens in bbolt (v1.3.6,
// etcd 3.4's, read-write and read-only) and passes its tx.Check().
//
// Shape of the file: pages 0 and 1 are meta pages (txid 0 and 1, same
// tree), page 2 an empty freelist page, and from page 3 on the B+tree pages
// in the order they fill: each bucket's leaf pages in key order, each branch
// page as it fills, a bucket's root when the bucket ends. Leaf and branch
// pages are filled to the page size (bbolt splits them on later writes); an
// element larger than a page gets a page of its own with overflow pages.
// Every nested bucket has pages of its own (no inline buckets); the file
// has no free pages and no gaps.
//
// Memory bound: one page of elements per tree level per open bucket (the
// root bucket counts as one), plus, for an element larger than a page, that
// element and the image of its page (about twice the value), plus a 1 MiB
// output buffer. A tree of 4 KiB pages holding 17-byte keys is 4 levels
// deep at about 40M keys, so etcd's nesting (root → bucket) stays well under
// 64 KiB plus 1 MiB plus twice the largest value, whatever the file's size
// (unit test BboltStreaming.* checks the bound; a measurement:
// bench/RESULTS.md, "Measurements moved from headers").
//
// The output must be a seekable regular file: the meta pages, which name the
// root and the page count, are written last, at offset 0.
//
// Errors: InvalidArgument for misuse (keys out of order, empty or too large
// keys, put at the top level, end_bucket without a bucket, finish with
// buckets open); Internal for I/O failures (message names the file). After
// an error the writer refuses everything. A writer destroyed before a
// successful finish() removes its file, so a failed write leaves no file
// that could pass for a database.
//
// Thread-safety: none; one thread uses a writer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace etcdq::bbolt {

class Writer {
 public:
  static constexpr uint32_t kPageSize = 4096;

  Writer();
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Creates (or truncates) the file at `path`.
  Error open(const std::string& path);

  // Starts a nested bucket named `name` inside the current bucket (at the
  // top level, a top-level bucket). `name` must sort after every key and
  // bucket name given before in the current bucket (bytewise).
  Error begin_bucket(std::string_view name);

  // Adds a key/value to the current bucket; `key` must sort after the
  // previous key or bucket name in it. Not allowed at the top level (bbolt's
  // root holds buckets only). An empty value is allowed; an empty key not.
  Error put(std::string_view key, std::string_view value);

  // Closes the current bucket.
  Error end_bucket();

  // Writes the root, the freelist and the meta pages, fsyncs and closes the
  // file. All buckets must be closed.
  Error finish();

  // Pages written so far (the file's size is pages() * kPageSize after finish).
  uint64_t pages() const { return next_pgid_; }

 private:
  struct Entry {
    uint32_t flags = 0;
    std::string key;
    std::string value;  // leaf only
    uint64_t child = 0; // branch only
  };
  struct Level {
    std::vector<Entry> entries;
    size_t bytes = 0;             // page header + elements + keys + values
    uint64_t pages_written = 0;
  };
  struct Tree {
    std::string name;  // this bucket's key in its parent
    std::vector<Level> levels;
    std::string last_key;
    bool has_last = false;
  };

  Error check_key(Tree& t, std::string_view key);
  Error add(Tree& t, size_t level, Entry e);
  Error flush_level(Tree& t, size_t level);
  Error finish_tree(Tree& t, uint64_t* root);
  Error write_page(uint16_t flags, const std::vector<Entry>& entries, bool leaf, uint64_t* pgid);
  Error flush_output();
  Error fail(Error e);

  int fd_ = -1;
  std::string path_;
  Error error_;
  bool finished_ = false;
  uint64_t next_pgid_ = 3;  // 0, 1: meta; 2: freelist
  std::vector<Tree> open_;  // open_[0] is the root bucket
  std::string out_;         // pages not yet written, starting at out_offset_
  uint64_t out_offset_ = 0;
  std::string page_;        // scratch page image
};

}  // namespace etcdq::bbolt
