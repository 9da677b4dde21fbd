// Internal to consensus/: a follower's own proposals, one role of consensus::Node.
// They go to the leader's Peer.Propose (consensus/forwarder.h) as framed bytes
// and are answered when this member applies them (Fsm::apply reports their
// tag), or fail on error or after the request timeout. A leader that turned
// out not to be one refused them before proposing, so they are sent again;
// while no leader is known they are held (etcd holds them too, until its
// request timeout).
//
// Threads: the consensus thread only (consensus/node_impl.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "consensus/node.h"
#include "consensus/pending.h"

namespace etcdq::consensus {

class ForwardedProposals {
 public:
  explicit ForwardedProposals(Node::Impl& node) : n_(node) {}

  // Hands this member's proposals to the leader, framed here; their `done`
  // waits in Node::Impl::waiters like any proposal's. Commands forwarded
  // to us fail with leader_changed(): we no longer lead.
  void forward(std::vector<Pending>& batch);
  // Proposals held while no leader was known: to the leader now, or
  // proposed here if this member leads.
  void flush_held();
  // A Peer.Propose call for `ids` failed: not_leader() means unproposed
  // (held for the next leader); anything else fails them.
  void on_failure(const std::vector<uint64_t>& ids, const Error& e);
  // Proposal `id` was answered (applied here, or failed).
  void answered(uint64_t id) { unanswered_.erase(id); }
  // Those past their deadline fail with errors::timeout().
  void expire(std::chrono::steady_clock::time_point now);
  // Stopping: every one still out fails with errors::stopped().
  void stop_all();

 private:
  void send_to_leader(const std::vector<uint64_t>& ids);

  Node::Impl& n_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> deadlines_;
  // Ours that went (or wait to go) to a leader, framed, until answered.
  std::unordered_map<uint64_t, std::string> unanswered_;
  std::vector<uint64_t> held_;
};

}  // namespace etcdq::consensus
