// Installing another member's state (a libraft snapshot this member is too
// far behind for), so that no failure leaves libraft running on a state
// that does not match its log.
//
// Before the state is touched, an install plan is written to the data dir
// (the least index the state must reach, and every member that may have
// it). Any member's state at or above that index will do: entries
// between the snapshot's index and the state's are skipped when libraft
// replays them. If no member can be reached, or the transfer fails, the
// member stops; at its next start, main() finds the plan and fetches the
// state before libraft starts (retrying until a member answers), so a
// member never runs with a partial state or a state behind its log.
//
// Thread-safety: none; called by the consensus thread or by main() before
// the node starts (stage_state also by consensus/state_prefetch.h's thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "consensus/forwarder.h"
#include "consensus/fsm.h"

namespace etcdq::consensus {

struct InstallPlan {
  uint64_t min_index = 0;            // the state must be at this applied index or later
  std::vector<std::string> targets;  // Peer targets (host:port), the snapshot's taker first
  // Asked, once a state is staged, which of them leads and its last Raft
  // log index: a state past it is refused (a sender's applied index of
  // 2^62 left the member skipping every entry after it, serving an old
  // revision: issue #36). Empty: the targets. Not written to the file.
  std::vector<std::string> witnesses;
};

// The plan's file in the data dir. Errors: the file system's.
Error write_plan(const std::string& path, const InstallPlan& plan);
bool read_plan(const std::string& path, InstallPlan* plan);
void remove_plan(const std::string& path);

// One pass over the plan's targets: fetches the state, at min_index or
// later, from the first that has it, into `fsm`. Errors: the
// last target's; *damaged as Fsm::restore says.
// `member_of` (may be empty) names the member at a target's address: each
// attempt at a known member is counted in etcd's
// etcd_network_snapshot_receive_{success,failures,inflights_total,
// total_duration_seconds}{From} (consensus/metrics.h).
// With `quiet`, an attempt is logged only when it succeeds (the caller
// logs the failures).
Error fetch_state(Fsm* fsm, Forwarder& forwarder, const InstallPlan& plan, bool* damaged,
                  const std::function<uint64_t(const std::string&)>& member_of = {}, bool quiet = false);

// What main() does with a plan found at start, before libraft starts:
// fetch_state in rounds until one succeeds or `stop` says so (then
// *stopped, and the plan stays for the next start). The plan names the
// members of the install's time, which may have been removed since (a
// member SIGKILLed mid-install whose peers were replaced while it was
// down retried them for good: issue #36), so each round also tries
// `more` (--initial-cluster's peers) and every member a reachable target
// lists (Peer.Configuration), never `self` (this member's peer host:port).
// Between rounds it waits kStartRetryFirst, doubling up to
// kStartRetryMax (the wait after the members come back, so short); it
// logs each target tried and why it failed in the first round, then one
// line with the same at most every kStartLogEvery.
inline constexpr std::chrono::milliseconds kStartRetryFirst{500};
inline constexpr std::chrono::milliseconds kStartRetryMax{4000};
inline constexpr std::chrono::seconds kStartLogEvery{30};
void fetch_planned_state(Fsm* fsm, InstallPlan plan, const std::vector<std::string>& more, const std::string& self,
                         const std::function<bool()>& stop, bool* stopped);

// fetch_state's first half: the state fetched from the first target that
// has it and kept aside (Fsm::stage), the state in use unchanged. A state
// whose applied index is past the last index of a leader among the
// witnesses (other than its sender) is refused; with no leader answering
// it is taken (logged: nothing else bounds it without a quorum, and
// requiring one would keep a member whose vote the cluster needs from
// ever installing). Any
// thread (Fsm::stage's rule). With `cancel` set, the transfer stops at its
// next chunk (or once no chunk came for Forwarder::kInactivityLimit).
Error stage_state(Fsm* fsm, Forwarder& forwarder, const InstallPlan& plan, std::unique_ptr<Fsm::Staged>* out,
                  const std::function<uint64_t(const std::string&)>& member_of = {},
                  const std::atomic<bool>* cancel = nullptr, bool quiet = false);

}  // namespace etcdq::consensus
