// RocksDB, as etcdq uses it: one database per member with a column family per
// kind of record. The Raft log is the write-ahead log of the state machine, so
// writes here are not fsynced one by one (see DESIGN.md, "Write path"), and
// what the log can replay skips RocksDB's own log (Durability::kReplayed):
// `make_durable()` makes everything written so far durable, and is called
// before libraft may drop log entries (snapshot).
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
struct UnloggedBytes;

// How a write survives a crash of the process. Neither kind is fsynced: a
// crash of the machine can lose both until make_durable().
enum class Durability {
  // Through RocksDB's write-ahead log: in the data dir once write() returns.
  kLogged,
  // In memtables only, until RocksDB flushes them (a full memtable,
  // kMaxUnflushedBytes of them in engine.cc, make_durable(), a clean
  // close). For what the Raft log replays after a
  // crash: apply's batches (mvcc/writer.h) and the compaction that follows
  // from them (mvcc/compactor.h). Flushes cover every column family at once
  // (RocksDB's atomic_flush), so what a crash leaves is the state after
  // some earlier write, with its applied index; the entries after it are
  // applied again. Skipping RocksDB's log saves its copy, checksum and
  // write(2) of every Raft entry on every member (bench/RESULTS.md, "Three
  // members: apply without RocksDB's log").
  kReplayed,
};

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
  // make_durable() and compact_all() return it from then on
  // without reaching RocksDB, and the process's handler hears of it
  // (storage/failure.h: a member stops).
  Error write(Batch& batch, Durability d = Durability::kLogged);
  Error write(IndexedBatch& batch, Durability d = Durability::kLogged);
  // Makes every write so far durable: fsync of RocksDB's WAL, and a flush
  // (fsynced) of the memtables when kReplayed writes are in them. Blocks
  // for the flush (tens of ms per 64 MiB memtable).
  Error make_durable();
  // Starts a flush of every memtable on RocksDB's background threads and
  // returns at once: a make_durable() soon after has little left to write.
  // A refused start loses nothing (logged). Any thread.
  void start_flush();
  // Bytes the database takes on disk (every file in its directory: SST
  // files, RocksDB's WAL, manifests), as etcd's dbSize is its file's size,
  // plus the kReplayed bytes not flushed yet (which a kLogged write would
  // have put in the WAL file), so that the quota sees every write at once.
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
  // Flushes every column family's memtables (make_durable()).
  Error flush_memtables();
  // After a kReplayed write: starts a flush, without waiting for it, once
  // kMaxUnflushedBytes (engine.cc) are in the memtables unflushed, so that
  // a crash leaves a bounded part of the log to apply again.
  void bound_unflushed();
  std::string dir_;
  std::shared_ptr<FailStop> fail_stop_;  // set before db_ opens; outlives it
  std::shared_ptr<UnloggedBytes> unlogged_;  // kReplayed bytes written and flushed (engine.cc)
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles_{};
  mutable std::atomic<int64_t> size_cache_{0};
  mutable std::atomic<int64_t> size_measured_ns_{0};
};

}  // namespace etcdq::storage
