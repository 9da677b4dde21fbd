// Inside storage/ only: the failure latch of one open RocksDB database
// (storage/failure.h says what it promises). Engine::open makes one per
// database; the Engine and the database's RocksDB listener share it.
//
// Thread-safety: every method from any thread.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/listener.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

#include "common/error.h"

namespace etcdq::storage {

class FailStop {
 public:
  explicit FailStop(std::string dir) : dir_(std::move(dir)) {}

  // Records the first failure (`what` failed with status `s`) and hands it
  // to the process's handler (failure.h); later calls only return.
  void fail(std::string_view what, const rocksdb::Status& s);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The first failure as errors::internal(its reason); OK while none.
  Error error() const;

  // Writes hold it shared, WAL syncs exclusively: a sync that met a WAL
  // writer whose append just failed on another thread (before that thread
  // reached fail()) would abort inside RocksDB (failure.h).
  std::shared_mutex& sync_mu() { return sync_mu_; }

  // For DBOptions::listeners: reports RocksDB's background errors (flush,
  // compaction, WAL write, MANIFEST write) to fail() and turns RocksDB's
  // automatic recovery from them off.
  static std::shared_ptr<rocksdb::EventListener> listener(std::shared_ptr<FailStop> f);

 private:
  const std::string dir_;
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::string reason_;  // under mu_
  std::shared_mutex sync_mu_;
};

}  // namespace etcdq::storage
