// Physical compaction, in the background. Apply only records the compaction
// revision C (reads below C fail from then on, on every member alike); this
// thread then removes, in small batches, every version that no read or watch
// at or above C can see: the revlog entries below C, and each history
// version below C except the newest one at or below C of a live key. Reads and writes
// never wait for it (etcd's compaction pauses the backend in batches; ours
// needs no pause because RocksDB snapshots isolate readers).
//
// Deterministic in everything a client can observe; the physical progress
// is local. An interrupted compaction resumes at the next start (it is
// idempotent: removing what is already gone is harmless).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "storage/engine.h"

namespace etcdq::mvcc {

class Compactor {
 public:
  // `finished`: the revision up to which compaction already completed.
  Compactor(storage::Engine* engine, int64_t finished);
  ~Compactor();  // stop()s

  // Stops between batches (the rest resumes at the next start) and answers
  // every when_finished() waiter with false, now and later: a member that
  // is shutting down must not keep a Compact(physical=true) call, and so
  // the client server's shutdown, waiting on a long compaction. Idempotent;
  // any thread but the compactor's.
  void stop();

  // Compact up to `rev` (no-op if already scheduled at or above it). Any thread.
  void schedule(int64_t rev);
  // Runs `done(true)` once compaction reached `rev`: at once on this thread
  // if it already has, else on the compactor thread; `done(false)` if the
  // compactor stops first. Used by Compact(physical=true).
  void when_finished(int64_t rev, std::function<void(bool)> done);
  int64_t finished() const;

 private:
  void run();
  bool compact_to(int64_t rev);  // false when stopped midway

  storage::Engine* engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t target_ = 0;
  int64_t finished_ = 0;
  bool stop_ = false;
  std::multimap<int64_t, std::function<void(bool)>> waiters_;
  std::thread thread_;
};

}  // namespace etcdq::mvcc
