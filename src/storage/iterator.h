// A position in one column family, moving in key order (storage/engine.h's
// column families; keys compare bytewise). What Engine, Snapshot and
// IndexedBatch hand out for scans.
//
// A thin owner of a RocksDB iterator: every call is inline and forwards to
// it, and key()/value() are views into RocksDB's buffers (no copy), valid
// until the iterator moves or is destroyed. Like RocksDB's, an iterator sees
// the state it was created on (a snapshot, a batch over the database, or the
// database at creation time) and pins the data it reads while it lives.
//
// Thread-safety: one thread at a time per iterator.
#pragma once

#include <rocksdb/iterator.h>
#include <rocksdb/slice.h>

#include <memory>
#include <string>
#include <string_view>

namespace etcdq::storage {

// Between string_view (the rest of etcdq) and RocksDB's Slice; no copies.
inline rocksdb::Slice to_slice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }
inline std::string_view to_view(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

class Iterator {
 public:
  // An empty iterator (false in a condition); only assigning to it is valid.
  Iterator() = default;
  explicit Iterator(rocksdb::Iterator* it) : it_(it) {}
  Iterator(Iterator&&) noexcept = default;
  Iterator& operator=(Iterator&&) noexcept = default;

  explicit operator bool() const { return it_ != nullptr; }

  // Whether it is at an entry. False past either end, and after a read
  // error (RocksDB's iterator status; etcdq treats both as the end).
  bool valid() const { return it_->Valid(); }
  // To the first key >= `key`.
  void seek(std::string_view key) { it_->Seek(to_slice(key)); }
  void seek_to_first() { it_->SeekToFirst(); }
  void seek_to_last() { it_->SeekToLast(); }
  // valid() must be true.
  void next() { it_->Next(); }
  void prev() { it_->Prev(); }
  std::string_view key() const { return to_view(it_->key()); }
  std::string_view value() const { return to_view(it_->value()); }
  // Whether it stopped on a read error rather than at the end (RocksDB's
  // status; a reader that must see everything checks it), and its text.
  bool failed() const { return !it_->status().ok(); }
  std::string error_text() const { return it_->status().ToString(); }

 private:
  std::unique_ptr<rocksdb::Iterator> it_;
};

}  // namespace etcdq::storage
