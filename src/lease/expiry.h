// Lease expiry, leader-only work (etcd's lessor.revokeExpiredLeases): while
// this member leads, every kCheck it proposes a revoke for each lease whose
// clock ran out, at most kMaxRevokesInFlight at a time, so expiry is an
// ordinary replicated delete of the attached keys that watchers see. It runs
// only between start_leading() and stop_leading() (member/leader_duties.h);
// a new leader first gives every lease its full TTL (etcd's Promote).
//
// Thread-safety: every method may be called from any thread; the checks run
// on this object's own thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "lease/lessor.h"

namespace etcdq::lease {

class Expiry {
 public:
  // `revoke(id, done)` proposes LeaseRevoke{id}; `done` once it applied or
  // failed.
  using Revoke = std::function<void(int64_t id, std::function<void()> done)>;

  Expiry(Lessor* lessor, Revoke revoke);
  ~Expiry();  // stop()

  void start_leading();
  void stop_leading();
  // Ends the thread (waits for it). Idempotent.
  void stop();

  static constexpr std::chrono::milliseconds kCheck{100};
  static constexpr size_t kMaxRevokesInFlight = 1000;

 private:
  void run();

  Lessor* lessor_;
  Revoke revoke_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool leading_ = false;
  bool stop_ = false;
  std::set<int64_t> revoking_;  // revokes proposed, not yet applied
  std::thread thread_;
};

}  // namespace etcdq::lease
