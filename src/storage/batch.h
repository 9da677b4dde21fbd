// Writes to the state database that become visible together: Engine::write
// applies a batch atomically (all of it or none), without fsync (engine.h).
//
// Batch: a plain write batch, for writes that need not read themselves
// (compaction, restore, the member's identity).
// IndexedBatch: a batch that reads back its own writes over the database
// (get, iterator), for the apply thread's one batch per Raft entry
// (mvcc/writer.h). A later put or remove of the same key in the same batch
// replaces the earlier one.
//
// Writes to `history` and `revlog` are not indexed: each revision adds new
// keys there and apply almost never reads them back before the batch is
// written, while indexing every write cost the apply thread a share of
// its time under queue load (bench/RESULTS.md, "Apply: unindexed
// history"). A read of those column families through the batch (a Txn's
// range at a revision an earlier request of the same entry wrote) indexes
// the batch's writes to that column family on the spot: slower, but it
// sees them all; later writes keep that index up to date.
//
// Keys and values are copied into the batch: the caller's buffers may go
// once a call returns.
//
// Thread-safety: none; one thread owns a batch.
#pragma once

#include <rocksdb/comparator.h>
#include <rocksdb/utilities/write_batch_with_index.h>
#include <rocksdb/write_batch.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "storage/engine.h"
#include "storage/iterator.h"

namespace etcdq::storage {

class Batch {
 public:
  // `engine` must outlive the batch; the batch is written to it.
  explicit Batch(const Engine* engine) : engine_(engine) {}

  void put(Cf cf, std::string_view key, std::string_view value) {
    batch_.Put(engine_->cf(cf), to_slice(key), to_slice(value));
  }
  void remove(Cf cf, std::string_view key) { batch_.Delete(engine_->cf(cf), to_slice(key)); }
  // Removes every key in [begin, end).
  void remove_range(Cf cf, std::string_view begin, std::string_view end) {
    batch_.DeleteRange(engine_->cf(cf), to_slice(begin), to_slice(end));
  }

  // Number of puts and removes in the batch.
  uint32_t count() const { return batch_.Count(); }
  // Bytes the batch holds (keys, values and RocksDB's framing).
  size_t data_size() const { return batch_.GetDataSize(); }
  void clear() { batch_.Clear(); }

 private:
  friend class Engine;
  const Engine* engine_;
  rocksdb::WriteBatch batch_;
};

class IndexedBatch {
 public:
  // `engine` must outlive the batch; reads see the batch over it.
  explicit IndexedBatch(const Engine* engine)
      : engine_(engine), batch_(rocksdb::BytewiseComparator(), 0, /*overwrite_key=*/true) {}

  void put(Cf cf, std::string_view key, std::string_view value) {
    auto* h = engine_->cf(cf);
    if (!unindexed(cf)) {
      batch_.Put(h, to_slice(key), to_slice(value));
      return;
    }
    appended_ |= bit(cf);
    appends_.Put(h, to_slice(key), to_slice(value));
    if (auto& side = side_[static_cast<int>(cf)]) side->Put(h, to_slice(key), to_slice(value));
  }
  void remove(Cf cf, std::string_view key) {
    auto* h = engine_->cf(cf);
    if (!unindexed(cf)) {
      batch_.Delete(h, to_slice(key));
      return;
    }
    appended_ |= bit(cf);
    appends_.Delete(h, to_slice(key));
    if (auto& side = side_[static_cast<int>(cf)]) side->Delete(h, to_slice(key));
  }

  // True and `value` set when `key` exists in `cf`: the batch's own write
  // if it has one (false if that write is a remove), else the database's
  // current value.
  bool get(Cf cf, std::string_view key, std::string* value) const;
  // The batch's writes merged over the database's current state of `cf`.
  // Valid while the batch lives and is not written to.
  Iterator iterator(Cf cf) const;

  // Whether `history` and `revlog` writes skip the index (see above).
  static constexpr bool unindexed(Cf cf) { return cf == Cf::kHistory || cf == Cf::kRevlog; }

 private:
  friend class Engine;
  static constexpr unsigned bit(Cf cf) { return 1u << static_cast<int>(cf); }
  // RocksDB's read calls are not const, though they do not change the batch.
  rocksdb::WriteBatchWithIndex& batch_mut() const { return const_cast<rocksdb::WriteBatchWithIndex&>(batch_); }
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles() const;
  // The index that reads of unindexed `cf` use: built from the batch's
  // writes to it at the first read, kept up to date by later writes (one
  // replay a batch at most, so a Txn of many such ranges costs what it
  // cost before history went unindexed). Null when `cf` has no writes.
  rocksdb::WriteBatchWithIndex* side_index(Cf cf) const;
  // The whole batch as one RocksDB batch in `out`: the indexed writes, then
  // the unindexed ones (other column families, so their order is free).
  // `out` null when there are no unindexed writes: batch_'s own is whole.
  rocksdb::Status merged(std::unique_ptr<rocksdb::WriteBatch>* out) const;

  const Engine* engine_;
  rocksdb::WriteBatchWithIndex batch_;
  rocksdb::WriteBatch appends_;  // unindexed column families' writes, in order
  unsigned appended_ = 0;        // bit(cf) for each column family in appends_
  // side_index(), by column family; built on a read (so mutable).
  mutable std::array<std::unique_ptr<rocksdb::WriteBatchWithIndex>, kCfCount> side_;
};

}  // namespace etcdq::storage
