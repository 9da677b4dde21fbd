// The consensus layer: libraft (canonical raft 0.15, libuv I/O and TCP
// transport) driving the apply function. Every mutation is a proposal that
// becomes a committed log entry before it is applied (DESIGN.md) — also on
// a single member, a one-voter cluster.
//
// Threads: libraft runs on one consensus thread with its own libuv loop.
// propose() and read_barrier() may be called from any thread; they hand
// work to that thread through a queue. Everything pending is proposed at
// once, packed into one log entry (up to kMaxEntryBytes), so a burst of
// writes shares one append and one fsync. Apply runs on the consensus
// thread in log order and completes each proposal's callback there.
//
// The log is the state machine's write-ahead log; RocksDB is not fsynced per
// entry. Before libraft takes a snapshot (and may drop log entries), the
// state database is synced, so nothing above its durable applied index is
// ever dropped. A snapshot's payload is only the applied index and
// revision: a member restores from its own database.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apply/applier.h"
#include "common/error.h"
#include "etcdq/command.pb.h"

namespace etcdq::raft {

struct Peer {
  uint64_t id = 0;
  std::string address;  // host:port of its peer listener
};

struct NodeOptions {
  std::string dir;              // the Raft log's directory (created if missing)
  uint64_t id = 0;              // this member's id (non-zero)
  std::string address;          // advertised peer host:port
  std::string bind_address;     // listen host:port (empty: `address`)
  std::vector<Peer> initial_cluster;  // voters of a new cluster
  unsigned heartbeat_ms = 100;   // etcd's --heartbeat-interval default
  unsigned election_ms = 1000;   // etcd's --election-timeout default
};

// Consensus progress, updated on the consensus thread, readable anywhere.
struct Progress {
  uint64_t term = 0;
  uint64_t leader_id = 0;  // 0: none known
  uint64_t commit_index = 0;
  uint64_t applied_index = 0;
  uint64_t last_index = 0;
  bool is_leader = false;
};

using ProposalDone = std::function<void(apply::Result&&)>;

class Node {
 public:
  Node(NodeOptions opts, apply::Applier* applier);
  ~Node();  // stop() if still running
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Opens (or bootstraps) the log and starts the consensus thread.
  // Errors: the log directory cannot be used (message names it).
  Error start();
  // Blocks until this member has a leader and has applied everything the
  // log held at start, or `timeout_ms` passes. Returns whether it is ready.
  bool wait_ready(int timeout_ms);

  // Proposes `cmd` (its origin and proposal_id are set here). `done` runs
  // exactly once on the consensus thread: with the apply result, or with
  // errors::stopped() / not_leader() / leader_changed() if it never applied.
  void propose(apply::Command cmd, ProposalDone done);
  // Runs `fn` once a linearizable read may be served from the applied state
  // (leadership confirmed, everything committed before the call applied),
  // or with the error that prevents it. `fn` may run on the calling thread.
  void read_barrier(std::function<void(Error)> fn);

  // Stops taking proposals, lets in-flight ones finish, closes libraft and
  // joins the consensus thread. Idempotent.
  void stop();

  Progress progress() const;
  uint64_t id() const { return opts_.id; }
  size_t voters() const { return opts_.initial_cluster.size(); }

  // Batching counters (for the benchmark report): entries proposed and
  // commands carried.
  uint64_t entries_proposed() const { return entries_proposed_.load(); }
  uint64_t commands_proposed() const { return commands_proposed_.load(); }

  static constexpr size_t kMaxEntryBytes = 4 << 20;

 private:
  struct Impl;
  NodeOptions opts_;
  std::unique_ptr<Impl> impl_;
  std::atomic<uint64_t> entries_proposed_{0};
  std::atomic<uint64_t> commands_proposed_{0};
};

}  // namespace etcdq::raft
