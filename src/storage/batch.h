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
// Keys and values are copied into the batch: the caller's buffers may go
// once a call returns. Every call is inline and forwards to RocksDB.
//
// Thread-safety: none; one thread owns a batch.
#pragma once

#include <rocksdb/comparator.h>
#include <rocksdb/utilities/write_batch_with_index.h>
#include <rocksdb/write_batch.h>

#include <cstddef>
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
    batch_.Put(engine_->cf(cf), to_slice(key), to_slice(value));
  }
  void remove(Cf cf, std::string_view key) { batch_.Delete(engine_->cf(cf), to_slice(key)); }

  // True and `value` set when `key` exists in `cf`: the batch's own write
  // if it has one (false if that write is a remove), else the database's
  // current value.
  bool get(Cf cf, std::string_view key, std::string* value) const {
    return batch_mut().GetFromBatchAndDB(engine_->db(), rocksdb::ReadOptions(), engine_->cf(cf), to_slice(key), value)
        .ok();
  }
  // The batch's writes merged over the database's current state of `cf`.
  // Valid while the batch lives and is not written to.
  Iterator iterator(Cf cf) const {
    auto* h = engine_->cf(cf);
    return Iterator(batch_mut().NewIteratorWithBase(h, engine_->db()->NewIterator(rocksdb::ReadOptions(), h)));
  }

 private:
  friend class Engine;
  // RocksDB's read calls are not const, though they do not change the batch.
  rocksdb::WriteBatchWithIndex& batch_mut() const { return const_cast<rocksdb::WriteBatchWithIndex&>(batch_); }
  const Engine* engine_;
  rocksdb::WriteBatchWithIndex batch_;
};

}  // namespace etcdq::storage
