// RocksDB, as etcdq uses it: one database per member with a column family per
// kind of record. The Raft log is the write-ahead log of the state machine, so
// writes here are not fsynced one by one (see DESIGN.md, "Write path"):
// `sync_wal()` makes everything written so far durable, and is called before
// libraft may drop log entries (snapshot).
//
// Thread-safety: all methods are safe to call from any thread (RocksDB is).
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/utilities/write_batch_with_index.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>

#include "common/error.h"

namespace etcdq::storage {

// Column families. Their key layouts are defined by their owners (mvcc/codec.h).
enum class Cf : int {
  kMeta = 0,     // applied index, revision counters (mvcc/store.h)
  kLatest = 1,   // live keys at the current revision: user key -> value record
  kHistory = 2,  // every version still retained: (user key, revision desc) -> record
  kRevlog = 3,   // every change in revision order: revision -> (type, user key)
};
inline constexpr int kCfCount = 4;

class Engine {
 public:
  // Opens the database in `dir`, creating it if missing. A directory that
  // exists but cannot be opened (corrupt, wrong format, locked by another
  // process) is an error naming the directory and RocksDB's reason.
  static Error open(const std::string& dir, std::unique_ptr<Engine>* out);
  ~Engine();

  rocksdb::DB* db() const { return db_.get(); }
  rocksdb::ColumnFamilyHandle* cf(Cf c) const { return handles_[static_cast<int>(c)]; }

  // Atomically applies `batch`, without fsync. Any failure is a storage error
  // the caller must treat as fatal (state would diverge from the log).
  Error write(rocksdb::WriteBatch* batch);
  // Makes every write so far durable (fsync of RocksDB's WAL).
  Error sync_wal();
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

 private:
  Engine() = default;
  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles_{};
  mutable std::atomic<int64_t> size_cache_{0};
  mutable std::atomic<int64_t> size_measured_ns_{0};
};

}  // namespace etcdq::storage
