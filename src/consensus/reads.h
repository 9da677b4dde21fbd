// Internal to consensus/: linearizable reads, one role of consensus::Node (the
// read index of Raft's §6.4, as etcd's linearizableReadLoop). A leader
// confirms its leadership for every read waiting at once with one barrier
// (libraft's raft_barrier); a follower asks the leader for a read index
// (Peer.ReadIndex, consensus/forwarder.h) that every read waiting then shares,
// and serves them once it applied that index. While no leader is known
// they wait, as etcd's do, until the request timeout (errors::timeout()).
//
// Threads: the consensus thread only (consensus/node_impl.h); read functions run
// on the completion threads, or on the consensus thread with an error.
#pragma once

extern "C" {
#include <raft.h>
}

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "common/error.h"
#include "consensus/node.h"

namespace etcdq::consensus {

class Reads {
 public:
  using ReadFn = std::function<void(Error)>;
  using IndexFn = std::function<void(Error, uint64_t)>;
  // A leader's answer to a read index call, handed back to the consensus
  // thread (Node::Impl::Inbox).
  struct Answer {
    uint64_t seq = 0;  // which call (an abandoned call's answer is ignored)
    Error error;
    uint64_t index = 0;
  };

  explicit Reads(Node::Impl& node) : n_(node) {}

  // Reads that arrived now (Node::read_barrier) and read index calls from
  // followers (Node::read_index, answered by a leader only).
  void serve(std::vector<ReadFn> rs, std::vector<IndexFn> irs, bool leader);
  // Reads whose read index is applied now go to the completion threads.
  void release(uint64_t applied);
  // Follower: asks the leader for a read index for every read waiting now.
  void send_read_index();
  // The leader changed while a read index call was out: its reads go to
  // the new leader (reads are safe to ask for again).
  void abandon_if_stale();
  void on_answer(Answer&& a);
  // Reads that ran out of time get errors::timeout().
  void expire(std::chrono::steady_clock::time_point now);
  // Stopping: every read waiting gets errors::stopped().
  void stop_all();
  bool followers_waiting() const { return !follower_reads_.empty(); }

 private:
  struct WaitingRead {
    std::chrono::steady_clock::time_point deadline;
    ReadFn fn;
  };
  static bool retryable(const Error& e);

  Node::Impl& n_;
  // Follower reads waiting for a read index call (held while no leader is
  // known), and those of the call in flight, to `read_index_leader_`.
  std::vector<WaitingRead> follower_reads_;
  std::vector<WaitingRead> read_index_batch_;
  bool read_index_inflight_ = false;
  uint64_t read_index_seq_ = 0;
  raft_id read_index_leader_ = 0;
  std::multimap<uint64_t, WaitingRead> waiting_apply_;  // by read index
};

}  // namespace etcdq::consensus
