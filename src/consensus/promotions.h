// Internal to consensus/: voters this leader added that are still spares, one
// role of consensus::Node. libraft cannot add a voter at once (it is added as a
// spare, then promoted once caught up) and gives up promoting a member that
// does not start within its catch-up rounds, so the promotion is retried,
// a heartbeat after the last try began (a spare gets no entries between
// tries), until it is a voter (consensus/membership.cc).
//
// Threads: the consensus thread only.
#pragma once

extern "C" {
#include <raft.h>
}

#include <chrono>
#include <set>

#include "consensus/node.h"

namespace etcdq::consensus {

class Promotions {
 public:
  explicit Promotions(Node::Impl& node) : n_(node) {}

  // `id` was added as a voter: promote it once it can be.
  void want_voter(raft_id id) { want_voter_.insert(id); }
  // Starts the next promotion due, if none is in flight and a heartbeat passed
  // since the last try. A member that is no longer leader forgets them all;
  // a new leader takes on every spare in the configuration once a term
  // (MemberPromote does not apply to spares; MemberList calls them voters).
  void try_next(std::chrono::steady_clock::time_point now);

 private:
  Node::Impl& n_;
  std::set<raft_id> want_voter_;
  std::chrono::steady_clock::time_point next_try_{};
  std::chrono::steady_clock::time_point next_log_{};  // failures logged at most once a second
  bool promoting_ = false;
  // The term in which this member, as leader, took on the spares already in
  // the configuration (added under an earlier leader).
  raft_term adopted_term_ = 0;
};

}  // namespace etcdq::consensus
