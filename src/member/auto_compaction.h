// etcd's auto-compaction (--auto-compaction-mode, --auto-compaction-retention;
// etcd 3.4's etcdserver/api/v3compactor: periodic.go, revision.go). It runs
// on every member and records revisions there, but compacts only while this
// member leads: LeaderDuties resumes and pauses it, as etcd's raft loop
// calls compactor.Resume()/Pause() on a leader change. A compaction is an
// ordinary Compact proposal (physical=false) through member/pipeline.h.
//
// The two schedules are plain objects driven by the caller's clock, so the
// rules can be tested without waiting; AutoCompactor runs one of them on a
// thread of its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"

namespace etcdq::member {

enum class CompactionMode { kPeriodic, kRevision };

// --auto-compaction-retention as etcd 3.4 reads it (embed/etcd.go,
// parseCompactionRetention): a bare non-negative integer is hours in
// periodic mode and a revision count in revision mode; anything else is a Go
// duration ("30m", "1h30m", "2s", "500ms"), also in revision mode, where
// etcd then keeps that many nanoseconds' worth of revisions (sic).
// *retention is milliseconds (periodic) or revisions (revision); 0 turns
// auto-compaction off. Errors: InvalidArgument naming the value.
Error parse_compaction_retention(CompactionMode mode, const std::string& text, int64_t* retention);

// A non-negative Go duration as etcd's duration flags take it (Go's
// time.ParseDuration: "0", "90s", "1h30m", "500ms"), in milliseconds
// (rounded down). Errors: InvalidArgument with Go's text.
Error parse_go_duration_ms(const std::string& text, int64_t* ms);

// Periodic mode, etcd's Periodic.Run: every tick_ms (a tenth of the
// retention, at most 6 minutes) it records the current revision; once a
// whole retention has passed since the last success it compacts to the
// revision recorded one retention ago, then every min(retention, 1 h).
// Like etcd 3.6 (not 3.4, which proposes it again and logs the apply
// failure) it does not compact the same revision twice.
class PeriodicSchedule {
 public:
  PeriodicSchedule(int64_t retention_ms, int64_t now_ms);

  int64_t tick_ms() const { return tick_ms_; }
  // At the start and after every tick: the current revision.
  void record(int64_t revision);
  // Every tick_ms: the revision to compact now, or 0. Paused (not leading)
  // never compacts.
  int64_t due(int64_t now_ms, bool leading);
  // The compaction of `revision` succeeded (or it was already compacted).
  void compacted(int64_t revision, int64_t now_ms);

 private:
  int64_t tick_ms_;
  int64_t compact_every_ms_;
  size_t keep_;
  std::deque<int64_t> revisions_;
  int64_t last_success_ms_;
  int64_t wait_ms_;  // the retention first, then compact_every_ms_
  int64_t last_revision_ = 0;
};

// Revision mode, etcd's Revision.Run: every 5 minutes, compact to the
// current revision minus the retention, unless that is <= 0 or already done.
class RevisionSchedule {
 public:
  static constexpr int64_t kTickMs = 5 * 60 * 1000;  // etcd's revInterval
  explicit RevisionSchedule(int64_t retention) : retention_(retention) {}

  int64_t tick_ms() const { return kTickMs; }
  int64_t due(int64_t current_revision, bool leading) const;
  void compacted(int64_t revision) { last_revision_ = revision; }

 private:
  int64_t retention_;
  int64_t last_revision_ = 0;
};

// The thread that runs a schedule. Thread-safety: set_leading() from any
// thread; start() and stop() from one.
class AutoCompactor {
 public:
  struct Hooks {
    std::function<int64_t()> current_revision;
    // Proposes Compact{revision}; calls done exactly once, from any thread.
    std::function<void(int64_t revision, std::function<void(Error)> done)> compact;
    std::function<std::chrono::steady_clock::time_point()> now = [] { return std::chrono::steady_clock::now(); };
  };

  // retention as parse_compaction_retention() gives it (> 0).
  AutoCompactor(CompactionMode mode, int64_t retention, Hooks hooks);
  ~AutoCompactor();  // stop()
  AutoCompactor(const AutoCompactor&) = delete;
  AutoCompactor& operator=(const AutoCompactor&) = delete;

  void start();
  void set_leading(bool leading);
  // Waits for a compaction in flight; idempotent.
  void stop();

 private:
  void run();
  int64_t now_ms() const;
  // Proposes and waits for the answer (the schedules are synchronous, as
  // etcd's).
  Error compact(int64_t revision);

  CompactionMode mode_;
  int64_t retention_;
  Hooks hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool leading_ = false;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace etcdq::member
