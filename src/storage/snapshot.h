// A consistent, read-only view of the whole state database at the moment it
// was taken (a RocksDB snapshot): later writes are not seen. Reads through
// it never block writers, and writers never block it. While a snapshot
// lives, RocksDB keeps every version it can see (compaction cannot drop
// them), so do not keep one longer than the reads that need it.
//
// Every read is inline and forwards to RocksDB.
//
// Thread-safety: const methods from any thread, concurrently.
#pragma once

#include <rocksdb/db.h>

#include <string>
#include <string_view>
#include <utility>

#include "storage/engine.h"
#include "storage/iterator.h"

namespace etcdq::storage {

class Snapshot {
 public:
  // Takes a snapshot of `engine` now. `engine` must outlive it.
  explicit Snapshot(const Engine* engine) : engine_(engine), snap_(engine->db()->GetSnapshot()) {}
  ~Snapshot() {
    if (snap_) engine_->db()->ReleaseSnapshot(snap_);
  }
  Snapshot(Snapshot&& o) noexcept : engine_(o.engine_), snap_(std::exchange(o.snap_, nullptr)) {}
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;
  Snapshot& operator=(Snapshot&&) = delete;

  // True and `value` set when `key` exists in `cf` at the snapshot.
  bool get(Cf cf, std::string_view key, std::string* value) const {
    return engine_->db()->Get(options(), engine_->cf(cf), to_slice(key), value).ok();
  }
  // `cf` at the snapshot. Valid while the snapshot lives.
  Iterator iterator(Cf cf) const { return Iterator(engine_->db()->NewIterator(options(), engine_->cf(cf))); }

  // The same for one pass over much of the data (a snapshot file, a hash):
  // what it reads does not go into the block cache, so the pass neither
  // grows the process by the cache's size nor evicts what serves clients.
  bool bulk_get(Cf cf, std::string_view key, std::string* value) const {
    return engine_->db()->Get(options(false), engine_->cf(cf), to_slice(key), value).ok();
  }
  Iterator bulk_iterator(Cf cf) const {
    return Iterator(engine_->db()->NewIterator(options(false), engine_->cf(cf)));
  }

 private:
  rocksdb::ReadOptions options(bool fill_cache = true) const {
    rocksdb::ReadOptions ro;
    ro.snapshot = snap_;
    ro.fill_cache = fill_cache;
    return ro;
  }
  const Engine* engine_;
  const rocksdb::Snapshot* snap_;
};

}  // namespace etcdq::storage
