// Internal to consensus/: fetching another member's state while libraft
// stores the snapshot that calls for it, one role of consensus::Node.
//
// libraft hands a follower's state machine the snapshot (Fsm restore) only
// once it has written the snapshot's metadata and dropped its log (fsyncs:
// 40-70 ms on a loaded host), and the state transfer began only then. The
// receive hook starts the transfer (stage_state, into files beside the
// database; the state in use is not touched) as the InstallSnapshot
// message arrives, and the install takes what it fetched (issue #36: a
// leader paused 4 s under load served again 0.45 s after it resumed, etcd
// 0.26 s).
//
// At most one transfer at a time. A staged state nobody takes (libraft
// refused the snapshot) is dropped after kKeep, or when another snapshot
// comes, with its files.
//
// Threads: every method on the consensus thread; the transfer runs on a
// thread of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"
#include "consensus/forwarder.h"
#include "consensus/fsm.h"
#include "consensus/snapshot_install.h"

namespace etcdq::consensus {

class StatePrefetch {
 public:
  using Clock = std::chrono::steady_clock;
  // A staged state not taken within this is dropped (expire).
  static constexpr std::chrono::seconds kKeep{10};

  // `fsm` and `forwarder` must outlive this.
  StatePrefetch(Fsm* fsm, Forwarder* forwarder) : fsm_(fsm), forwarder_(forwarder) {}
  ~StatePrefetch() { drop(); }
  StatePrefetch(const StatePrefetch&) = delete;
  StatePrefetch& operator=(const StatePrefetch&) = delete;

  // Starts fetching the state at plan.min_index or later from the plan's
  // targets, unless a transfer is under way already. A finished one for an
  // older index is dropped first.
  void start(InstallPlan plan, std::function<uint64_t(const std::string&)> member_of);
  // The staged state for a snapshot at `min_index`: waits for a transfer
  // under way, and answers what it fetched if that is at `min_index` or
  // later (then the install needs no transfer of its own); nullptr
  // otherwise (anything fetched is dropped).
  std::unique_ptr<Fsm::Staged> take(uint64_t min_index);
  // Drops a staged state fetched more than kKeep ago (on the tick).
  void expire(Clock::time_point now);
  // Stops a transfer under way (at its next chunk) and drops what it fetched.
  void drop();

 private:
  void join();
  Fsm* fsm_;
  Forwarder* forwarder_;
  std::thread thread_;      // the transfer, while joinable
  std::atomic<bool> cancel_{false};
  std::atomic<bool> done_{false};  // the transfer's thread has finished
  uint64_t min_index_ = 0;
  Clock::time_point finished_at_{};
  // Written by the transfer's thread, read after join().
  std::unique_ptr<Fsm::Staged> staged_;
  Error error_;
};

}  // namespace etcdq::consensus
