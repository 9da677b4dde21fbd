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
// ever dropped. A snapshot's payload is only metadata (applied index,
// revision, who took it): a member restarting restores from its own
// database; a member too far behind streams the taker's state as it is
// then, at the snapshot's index or later (Peer.FetchSnapshot, member/fsm.h
// stream_state, as etcd sends its database as it is at the send), which
// never holds the data set in memory. Installing it blocks that member's
// consensus thread for the transfer (it is of no use to the cluster until
// then anyway).
//
// On a follower, proposals are forwarded to the leader (Peer.Propose, on its
// peer URL, consensus/transport.h carries libraft's own traffic there too) and
// answered when this member applies them; linearizable reads
// ask the leader for a read index (Peer.ReadIndex) that many reads share,
// then wait until this member applied it. A forwarded proposal or read that
// does not complete within the request timeout fails with
// errors::timeout(), as etcd's do.
//
// The state machine is a consensus::Fsm (consensus/fsm.h; member/fsm.h in the
// server): consensus moves a command's bytes and never opens them. libraft's I/O and the Peer calls are parts given in NodeOptions
// (consensus/io.h, consensus/forwarder.h), so a test runs several nodes in one
// process without sockets (tests/unit/consensus_cluster_test.cc).
//
// Inside, one role a file, all on the consensus thread (consensus/node_impl.h):
// consensus_loop.cc (wake-ups, ticks, closing), leadership.cc (who leads,
// progress), log_appends.cc (appends to the log), proposals.cc (batching,
// apply, answers), forwarding.cc (follower proposals), read_index.cc
// (linearizable reads), membership.cc (configuration changes, promotions,
// transfer), snapshots.cc (snapshot hooks and installs); node.cc is this
// facade. Roles that own state are objects (consensus/node_impl.h lists them).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "consensus/forwarder.h"
#include "consensus/fsm.h"
#include "consensus/io.h"

namespace etcdq::consensus {

struct Peer {
  uint64_t id = 0;
  std::string address;  // host:port of its peer listener
};

struct NodeOptions {
  std::string dir;              // the Raft log's directory (created if missing)
  uint64_t id = 0;              // this member's id (non-zero)
  std::string address;          // advertised peer host:port (the peer server listens on --listen-peer-urls)
  std::vector<Peer> initial_cluster;  // voters of a new cluster
  // --initial-cluster-state existing: do not bootstrap; wait until the
  // leader (which added this member) sends the log or a snapshot.
  bool join = false;
  unsigned heartbeat_ms = 100;   // etcd's --heartbeat-interval default
  unsigned election_ms = 1000;   // etcd's --election-timeout default
  // Commands applied between snapshots (etcd's --snapshot-count) and
  // commands whose entries are kept behind one for followers that lag a
  // little (etcd's --snapshot-catchup-entries, 5000 as etcd's
  // DefaultSnapshotCatchUpEntries; member/member.cc caps the default at
  // --snapshot-count). Commands, as etcd counts its one-request entries: an
  // entry here carries a batch (consensus/snapshots.cc).
  // A leader keeps more while a snapshot it sent may still be installing,
  // and for kSnapshotHold after the send (etcd's releaseDelayAfterSnapshot,
  // server.go compactRaftLog): the follower then goes on from the log, with
  // no second snapshot (consensus/snapshots.cc, Node::Impl::trailing_for).
  unsigned snapshot_threshold = 8192;
  unsigned snapshot_trailing = 5000;
  // etcd's --strict-reconfig-check: refuse membership changes that would
  // leave too few reachable voters for a quorum.
  bool strict_reconfig_check = true;
  bool pre_vote = true;  // etcd's --pre-vote
  // etcd's --max-learners: add_member refuses a learner beyond it.
  unsigned max_learners = 1;
  // etcd's --force-new-cluster: when `dir` holds a log, start() first
  // appends a configuration of this member alone as a voter (libraft's
  // raft_recover), so the member's data goes on as a one-member cluster,
  // as etcd rewrites its membership to itself. Every entry already in the
  // log is kept (etcd drops the ones its WAL had not seen committed); the
  // other members must not be started again with their old data. Without
  // a log it changes nothing: a new cluster bootstraps from
  // initial_cluster, as etcd's does.
  bool force_new_cluster = false;
  // libraft's I/O (consensus/io.h). Unset: raft_uv on `dir` with the raw TCP
  // transport behind the peer URL's listener (consensus/transport.h). Tests put an in-process transport here.
  IoFactory io;
  // Calls to other members (consensus/forwarder.h). Unset: gRPC on peer URLs.
  // Tests route them to nodes in the same process.
  std::shared_ptr<Forwarder> forwarder;
  // Where an install plan is kept while a snapshot installs (snapshot_install.h).
  std::string install_plan_path;
  // Called on the consensus thread when this member starts (true) or stops
  // (false) leading, as braft's on_leader_start/on_leader_stop: leader-only
  // work hangs on it (member/leader_duties.h). Must not block. Also called
  // with false when the node stops while leading.
  std::function<void(bool leading)> on_role_change;
  // Called once (on the consensus thread) when this member's removal from
  // the cluster committed; etcd's member then exits.
  std::function<void()> on_removed;
  // Forwarded proposals and reads: etcd's request timeout, 5 s plus two
  // election timeouts.
  unsigned request_timeout_ms() const { return 5000 + 2 * election_ms; }
};

// One server of libraft's configuration, as the leader sees it.
struct MemberState {
  uint64_t id = 0;
  std::string address;    // peer host:port
  bool learner = false;   // RAFT_STANDBY (etcd's learner)
  bool voter = false;     // RAFT_VOTER; neither: RAFT_SPARE (being added)
  uint64_t match_index = 0;  // leader only: replicated up to here
  bool reachable = false;    // leader only: heard from within an election timeout (self: true)
};

// Consensus progress, updated on the consensus thread, readable anywhere.
struct Progress {
  uint64_t term = 0;
  uint64_t leader_id = 0;  // 0: none known
  uint64_t commit_index = 0;
  uint64_t applied_index = 0;
  uint64_t last_index = 0;
  bool is_leader = false;
  bool is_learner = false;  // RAFT_STANDBY in the configuration
};

// How a proposal ends: applied (OK, and `outcome` is what the Fsm gave for
// it), or never applied here (the error; `outcome` null).
using ProposalDone = std::function<void(Error, std::unique_ptr<Outcome> outcome)>;

// The tag a proposed command carries in its bytes, so that Fsm::apply can
// report its outcome back to this proposal (consensus::Applied).
struct ProposalTag {
  uint64_t origin = 0;  // this node, random per process
  uint64_t id = 0;      // unique among this node's proposals
};

// libraft's log in `dir` has been written to: libraft keeps metadata1 and
// metadata2 there from its first term on.
bool log_exists(const std::string& dir);

class Node {
 public:
  // `fsm` must outlive the node; the consensus thread alone calls it.
  Node(NodeOptions opts, Fsm* fsm);
  ~Node();  // stop() if still running
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Opens (or bootstraps) the log and starts the consensus thread.
  // Errors: the log directory cannot be used (message names it).
  Error start();
  // Blocks until this member has a leader and has applied everything the
  // log held at start, or `timeout_ms` passes. Returns whether it is ready.
  bool wait_ready(int timeout_ms);

  // Proposes one command: `encode` (called here, on the caller's thread)
  // returns its bytes, carrying the tag it is given. `done` runs
  // exactly once: with the apply outcome (on a completion thread, where the
  // answer route says, or on the consensus thread when the member has
  // nothing else to do), or with errors::stopped() / not_leader() /
  // leader_changed() if it never applied (on the consensus thread, or on
  // the caller's for a node already stopped). It must be brief and never
  // block.
  void propose(const std::function<std::string(ProposalTag)>& encode, ProposalDone done);
  // Leader: proposes commands a follower forwarded, each one frame
  // (common/entry_frames.h) carrying the follower's tag, copied into the log
  // as they are. `done` runs once their entry applied here (OK) or could
  // not be (the error); any thread. Consensus does not open them: the
  // caller must have decoded and checked every one (member/forwarded.h),
  // since once committed every member must apply it.
  void propose_forwarded(std::vector<std::string> commands, std::function<void(Error)> done);
  // Runs `fn` once a linearizable read may be served from the applied state
  // (leadership confirmed, everything committed before the call applied),
  // or with the error that prevents it. `fn` may run on the calling thread.
  void read_barrier(std::function<void(Error)> fn);
  // Leader: confirms leadership and returns an index every write
  // acknowledged before the call is at or below (Peer.ReadIndex).
  void read_index(std::function<void(Error, uint64_t)> fn);

  // Membership, on the leader (errors::not_leader() elsewhere). `done` runs
  // on the consensus thread once the configuration entry committed.
  // add: a learner becomes RAFT_STANDBY; a voter is added as spare and then
  // promoted once libraft caught it up (libraft cannot add a voter at once).
  void add_member(uint64_t id, std::string address, bool learner, std::function<void(Error)> done);
  void promote_member(uint64_t id, std::function<void(Error)> done);
  void remove_member(uint64_t id, std::function<void(Error)> done);
  // Leadership transfer (etcd's MoveLeader); `done` once `id` leads or the
  // transfer timed out (errors::timeout()).
  void transfer_leadership(uint64_t id, std::function<void(Error)> done);
  std::vector<MemberState> members() const;
  // The leader says this member was removed (Peer.Removed): stop, once.
  void removed_by_leader();

  Forwarder& forwarder();
  // The leader's peer host:port (where it serves Peer), "" when no leader
  // is known or it is us.
  std::string leader_target() const;
  // A connection the peer URL's listener routed to libraft (it opened with
  // consensus::PeerTransport::kMagic), taken over from any thread; closed when
  // libraft does not listen (before start(), after stop()) or when
  // NodeOptions::io carries messages some other way.
  void adopt_peer_connection(int fd);

  // Where the answers to this member's own proposals run. `route` is called
  // on the consensus thread after every applied entry, with that entry's
  // answers as a task (empty when it has none of this member's); it either
  // takes the task (true) to run it itself, or leaves it (false) to the
  // node, which runs it at once (on a completion thread, or on the
  // consensus thread when nothing else is due: Node::propose). The member holds them
  // until the entry's watch events are written (member/answer_gate.h), so
  // watchers get a put's event before the writer gets its answer, as from
  // etcd. An answer so held may go out after a later entry's: those
  // operations overlapped, so either order is linearizable. `drain` is
  // called by stop() once the consensus thread has ended, and must run
  // every answer the route took before it returns. Any thread; pass {} to
  // unset: once that returns, neither is called again. Unset: completion
  // threads.
  using AnswerRoute = std::function<bool(std::function<void()>& answers)>;
  void set_answer_route(AnswerRoute route, std::function<void()> drain);

  // Stops taking proposals, lets in-flight ones finish, closes libraft and
  // joins the consensus thread. Idempotent.
  void stop();

  Progress progress() const;
  uint64_t id() const { return opts_.id; }
  const NodeOptions& options() const { return opts_; }

  // Batching counters (for the benchmark report): entries proposed and
  // commands carried.
  uint64_t entries_proposed() const { return entries_proposed_.load(); }
  uint64_t commands_proposed() const { return commands_proposed_.load(); }

  static constexpr size_t kMaxEntryBytes = 4 << 20;

  // The consensus thread's state and roles: internal to consensus/
  // (consensus/node_impl.h).
  struct Impl;

 private:
  // Runs `task` on the consensus thread, or `on_stopped(errors::stopped())`.
  void run_task(std::function<void()> task, const std::function<void(Error)>& on_stopped);
  NodeOptions opts_;
  std::unique_ptr<Impl> impl_;
  std::atomic<uint64_t> entries_proposed_{0};
  std::atomic<uint64_t> commands_proposed_{0};
};

}  // namespace etcdq::consensus
