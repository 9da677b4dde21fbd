// Internal to consensus/: when a message from each member last arrived, one
// role of consensus::Node (recorded by its receive hook, consensus/leadership.cc).
// libraft's own recent_recv flag is cleared every election timeout, so
// right after a clear every follower looks silent; this does not. Used for
// etcd's --strict-reconfig-check and MemberState::reachable.
//
// Threads: the consensus thread only.
#pragma once

extern "C" {
#include <raft.h>
}

#include <chrono>
#include <map>

namespace etcdq::consensus {

class PeerContact {
 public:
  using Clock = std::chrono::steady_clock;

  // A message from `id` (a member of the configuration: the map must not
  // grow with ids a peer makes up) arrived at `now`.
  void heard(raft_id id, Clock::time_point now) { last_heard_[id] = now; }
  // Whether `id` was heard from within `window` (an election timeout)
  // before `now`.
  bool heard_within(raft_id id, Clock::time_point now, std::chrono::milliseconds window) const {
    auto it = last_heard_.find(id);
    return it != last_heard_.end() && now - it->second <= window;
  }

 private:
  std::map<raft_id, Clock::time_point> last_heard_;
};

}  // namespace etcdq::consensus
