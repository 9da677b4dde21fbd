// RocksDB, as etcdq uses it: one database per member with a column family per
// kind of record. The Raft log is the write-ahead log of the state machine, so
// writes here are not fsynced one by one (see DESIGN.md, "Write path"):
// `sync_wal()` makes everything written so far durable, and is called before
// libraft may drop log entries (snapshot).
//
// The rest of etcdq reads and writes through this folder's small API
// (iterator.h, batch.h, snapshot.h) and never names a RocksDB type: storage/
// is the only layer that includes <rocksdb/...> (ctest
// layers.rocksdb_only_in_storage).
//
// Thread-safety: all methods are safe to call from any thread (RocksDB is).
#pragma once

#include <rocksdb/db.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "storage/iterator.h"

namespace etcdq::storage {

// Column families. Their key layouts are defined by their owners (mvcc/codec.h).
enum class Cf : int {
  kMeta = 0,     // applied index, revision counters (mvcc/store.h)
  kLatest = 1,   // live keys at the current revision: user key -> value record
  kHistory = 2,  // every version still retained: (user key, revision desc) -> record
  kRevlog = 3,   // every change in revision order: revision -> (type, user key)
};
inline constexpr int kCfCount = 4;
// Their names in RocksDB's manifest, by Cf ("default" is RocksDB's
// kDefaultColumnFamilyName, which kMeta uses).
inline constexpr const char* kCfNames[kCfCount] = {"default", "latest", "history", "revlog"};

class Batch;
class FailStop;
class IndexedBatch;

class Engine {
 public:
  // Opens the database in `dir`, creating it if missing. A directory that
  // exists but cannot be opened (corrupt, wrong format, locked by another
  // process) is an error naming the directory and RocksDB's reason.
  static Error open(const std::string& dir, std::unique_ptr<Engine>* out);
  ~Engine();

  // True and `value` set when `key` exists in `cf` now.
  bool get(Cf cf, std::string_view key, std::string* value) const {
    return db_->Get(rocksdb::ReadOptions(), this->cf(cf), to_slice(key), value).ok();
  }
  // `cf` as it is when the iterator is created (an implicit snapshot).
  Iterator iterator(Cf cf) const { return Iterator(db_->NewIterator(rocksdb::ReadOptions(), this->cf(cf))); }

  // Atomically applies `batch`, without fsync; each write's duration goes
  // to etcd_disk_backend_commit_duration_seconds (common/metrics.h). Any failure is a storage error
  // the caller must treat as fatal (state would diverge from the log). The
  // batch is left as it was (clear() it to reuse it). The first failure of
  // any write, sync, flush or compaction fails the database for good: this,
  // sync_wal() and compact_all() return it from then on
  // without reaching RocksDB, and the process's handler hears of it
  // (storage/failure.h: a member stops).
  Error write(Batch& batch);
  Error write(IndexedBatch& batch);
  // Makes every write so far durable (fsync of RocksDB's WAL).
  Error sync_wal();
  // Starts flushing the memtables in the background, without waiting, when
  // they hold more than `bytes`: a start after a crash replays RocksDB's WAL
  // back to the last flush (Open took 2.2 s after a member was SIGKILLed
  // under writes with 60 MB unflushed). A failed flush fails the database,
  // as any (storage/failure.h); scheduling errors are only logged.
  void flush_in_background_over(uint64_t bytes);
  // Bytes the database takes on disk (every file in its directory: SST
  // files, RocksDB's WAL, manifests), as etcd's dbSize is its file's size.
  // Never 0 (etcdctl divides by it). Measured at most every
  // kSizeRefresh (every write checks the quota; listing the directory per
  // write cost several percent of put throughput). Any thread.
  int64_t size_bytes() const;
  static constexpr int64_t kSizeRefreshNs = 100'000'000;
  // RocksDB's estimate of the live data plus memtables (etcd's
  // dbSizeInUse); never 0 and never above size_bytes().
  int64_t in_use_bytes() const;
  const std::string& dir() const { return dir_; }

  // Compacts every column family in full (etcd's defragment): reclaims the
  // space of removed and superseded records. Blocks the calling thread for
  // as long as it takes (seconds to minutes); reads and writes go on
  // meanwhile. Errors: RocksDB's, as "defragment failed: ...".
  Error compact_all();

 private:
  friend class Batch;
  friend class IndexedBatch;
  friend class Snapshot;
  friend class BulkLoad;
  rocksdb::DB* db() const { return db_.get(); }
  rocksdb::ColumnFamilyHandle* cf(Cf c) const { return handles_[static_cast<int>(c)]; }
  // The database's failure latch (storage/fail_stop.h), shared with its
  // RocksDB listener.
  FailStop& fail_stop() const { return *fail_stop_; }

  Engine() = default;
  std::string dir_;
  std::shared_ptr<FailStop> fail_stop_;  // set before db_ opens; outlives it
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles_{};
  mutable std::atomic<int64_t> size_cache_{0};
  mutable std::atomic<int64_t> size_measured_ns_{0};
};

}  // namespace etcdq::storage
