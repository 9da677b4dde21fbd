// Internal to consensus/: the state of one consensus::Node and the roles that work on
// it (braft's split of node, replicator, fsm_caller, snapshot_executor).
// Roles that own state are objects with a header of their own, composed
// here: ForwardedProposals (a follower's proposals, consensus/forwarded_proposals.h),
// Reads (linearizable reads, consensus/reads.h), Promotions (voters added as
// spares, consensus/promotions.h), PeerContact (who was heard from,
// consensus/peer_contact.h) and LogAppends (how appends reach libraft,
// consensus/log_appends.h). What is left in Impl is what several roles share:
// libraft itself, the queues callers fill, the proposals' waiters, who
// leads, and the libraft requests in flight. node.cc is the facade that
// hands work to the thread.
//
// Threads: libraft's rule, one thread (the consensus thread runs libraft's
// loop and every role: no role takes a lock against another). The fields
// under `mu`, the inbox, ready_* and progress_* are shared with callers'
// threads (their lock says so); everything else is the consensus thread's
// alone.
#pragma once

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <spdlog/spdlog.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/executor.h"
#include "etcdq/consensus.pb.h"
#include "consensus/libraft_patches.h"
#include "consensus/forwarded_proposals.h"
#include "consensus/log_appends.h"
#include "consensus/node.h"
#include "consensus/peer_contact.h"
#include "consensus/pending.h"
#include "consensus/promotions.h"
#include "consensus/reads.h"
#include "consensus/snapshot_install.h"
#include "consensus/state_prefetch.h"

namespace etcdq::consensus {

inline constexpr unsigned kTickMs = 10;
inline constexpr int kCompletionThreads = 2;
// A follower forwards at most this many bytes of proposals in one call.
inline constexpr size_t kMaxForwardBytes = 1 << 20;

using SteadyClock = std::chrono::steady_clock;
// A snapshot install that found no member to send the state tries again
// after this, doubling up to kInstallRetryMax.
inline constexpr std::chrono::milliseconds kInstallRetryFirst{250};
inline constexpr std::chrono::milliseconds kInstallRetryMax{4000};
// How long a leader keeps the log behind a snapshot it sent (trailing_for):
// while the follower has not reported it installed, up to kSnapshotHoldMax
// (a follower that died meanwhile must not make the log grow for ever), then
// up to kSnapshotHold after the send (etcd's releaseDelayAfterSnapshot).
// In libraft's clock, ms.
inline constexpr raft_time kSnapshotHold = 30 * 1000;
inline constexpr raft_time kSnapshotHoldMax = 120 * 1000;
// How long a follower that installed a snapshot may be silent before the
// leader stops keeping the log it is catching up on (trailing_for), in
// election timeouts.
inline constexpr unsigned kInstalledSilenceElections = 5;

// libraft's status as etcd's error.
inline Error raft_error(int rv, const char* what) {
  switch (rv) {
    case RAFT_NOTLEADER: return errors::no_leader();
    case RAFT_LEADERSHIPLOST: return errors::leader_changed();
    case RAFT_SHUTDOWN:
    case RAFT_CANCELED: return errors::stopped();
    default: return errors::internal(std::string(what) + ": " + raft_strerror(rv));
  }
}

struct Node::Impl {
  // ---- shared with callers' threads (node.cc) --------------------------------
  Node* node;
  NodeOptions* opts;
  Fsm* sm;  // the state machine (consensus/fsm.h); consensus thread only
  std::unique_ptr<Executor> completions;  // answers proposals off this thread (but see on_fsm_apply)
  std::mutex route_mu;
  Node::AnswerRoute answer_route;      // guarded by route_mu (set_answer_route)
  std::function<void()> answer_drain;  // guarded by route_mu
  uint64_t origin = 0;  // this node's proposals' origin (random per start)
  std::atomic<uint64_t> next_id{1};

  using Pending = consensus::Pending;  // consensus/pending.h
  using ReadFn = Reads::ReadFn;
  using ReadIndexAnswer = Reads::Answer;
  std::mutex mu;  // guards everything up to stop_requested
  std::vector<Pending> queue;
  std::vector<ReadFn> reads;
  std::vector<std::function<void(Error, uint64_t)>> index_reads;  // Peer.ReadIndex on the leader
  std::vector<std::function<void()>> tasks;  // run on the consensus thread
  bool stop_requested = false;
  // Wakes the loop for what was just queued, or for the stop. With `mu`
  // held, and only while stop_requested is false or as the call that sets
  // it: the loop closes `wake` only after it has seen stop_requested, so a
  // send made under the lock never reaches a closed handle (libuv aborts on
  // a write to a closed loop's wake-up fd).
  void wake_locked() { uv_async_send(&wake); }

  // What gRPC callbacks of forwarded calls hand back to the consensus
  // thread. Shared with those callbacks, so it outlives a stopped node.
  struct Inbox {
    std::mutex mu;
    std::vector<std::pair<std::vector<uint64_t>, Error>> forward_failures;
    std::vector<ReadIndexAnswer> answers;
    uv_async_t* wake = nullptr;  // null once the loop is closing

    void post_failure(const std::vector<uint64_t>& ids, const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      forward_failures.emplace_back(ids, e);
      if (wake) uv_async_send(wake);
    }
    void post_answer(ReadIndexAnswer&& a) {
      std::lock_guard<std::mutex> lock(mu);
      answers.push_back(std::move(a));
      if (wake) uv_async_send(wake);
    }
  };
  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();

  std::mutex ready_mu;
  std::condition_variable ready_cv;
  bool ready = false;

  mutable std::mutex progress_mu;
  Progress progress;
  std::vector<MemberState> members_cache;  // guarded by progress_mu

  // ---- the consensus thread (consensus_loop.cc) --------------------------------
  uv_loop_t loop{};
  uv_async_t wake{};
  uv_timer_t tick{};
  std::unique_ptr<RaftIo> io;  // libraft's I/O (consensus/io.h)
  struct raft raft {};
  struct raft_fsm fsm {};
  std::thread thread;
  std::shared_ptr<Forwarder> forwarder;  // Peer calls (consensus/forwarder.h)
  // The state fetched while libraft stores a snapshot (consensus/state_prefetch.h).
  std::unique_ptr<StatePrefetch> prefetch;
  size_t inflight = 0;  // libraft requests not yet called back; closing waits for 0
  bool closing = false;

  // ---- leadership (leadership.cc) ------------------------------------------------
  // libraft changes leader and term inside its own tick and message
  // callbacks; these wrappers refresh the leader fields right after, so a
  // Status never names a leader our own 10 ms tick has not caught up with.
  raft_io_tick_cb libraft_tick = nullptr;
  raft_io_recv_cb libraft_recv = nullptr;
  int (*uv_start)(struct raft_io*, unsigned, raft_io_tick_cb, raft_io_recv_cb) = nullptr;
  raft_id last_leader_seen = 0;  // for etcd_server_leader_changes_seen_total
  // A follower's commit index heard before its entries were stored
  // (libraft_patches.h, 10): noted in recv_hook, applied there and once
  // LogAppends reports a stored append.
  HeardCommit heard_commit;
  // A follower's catch-up after its start, for the log (etcd logs each
  // phase of its own): the leader's commit index in the first append that
  // reached us, and when; logged once applied gets there (on_tick).
  struct CatchUp {
    bool contacted = false;
    raft_index target = 0;  // 0 once logged
    raft_index applied_at_contact = 0;
    SteadyClock::time_point at{};
  } catch_up;
  LogAppends log_appends{*this};  // how appends reach libraft (consensus/log_appends.h)
  // A leader knows every committed index once an entry of its own term
  // committed (Raft's §6.4 rule for read indexes); a barrier gets it there.
  raft_term committed_term = 0;
  raft_term term_barrier_term = 0;  // the term a barrier is out for
  raft_term stepped_down_term = 0;  // a term in which libraft told us we lost leadership
  bool role_leading = false;  // what on_role_change was last told
  bool was_member = false;
  bool removed = false;

  // ---- proposals (proposals.cc) ----------------------------------------------------
  std::unordered_map<uint64_t, ProposalDone> waiters;
  struct ApplyReq {
    struct raft_apply req;
    Impl* impl;
    std::vector<uint64_t> ids;
    std::vector<std::function<void(Error)>> forwarded;
  };

  // ---- roles that own their state (their headers) ---------------------------------
  ForwardedProposals forwarding{*this};  // a follower's own proposals (consensus/forwarded_proposals.h)
  Reads read_index{*this};               // linearizable reads (consensus/reads.h)
  Promotions promotions{*this};          // voters added as spares (consensus/promotions.h)
  PeerContact contact;                   // who was heard from when (consensus/peer_contact.h)
  bool heard_recently(raft_id id, SteadyClock::time_point now) const {
    return contact.heard_within(id, now, std::chrono::milliseconds(opts->election_ms));
  }

  // ---- barriers (read_index.cc) ----------------------------------------------------
  struct BarrierReq {
    struct raft_barrier req;
    Impl* impl;
    std::vector<std::function<void(Error)>> reads;
    raft_term term = 0;  // non-zero: the barrier that commits an entry of this term
  };

  // ---- membership (membership.cc) --------------------------------------------------
  struct ChangeReq {
    struct raft_change req;
    Impl* impl;
    std::function<void(Error)> done;
    std::function<void(Impl*)> then;  // a second step (assign after add)
  };
  struct TransferReq {
    struct raft_transfer req;
    Impl* impl;
    uint64_t target;
    std::function<void(Error)> done;
  };

  // ---- functions, by the file that holds them ------------------------------------
  // consensus/consensus_loop.cc: the consensus thread's wake-ups (drain) and ticks, deadlines, readiness, closing
  static void on_wake(uv_async_t* h) { static_cast<Impl*>(h->data)->drain(); }
  void expire(SteadyClock::time_point now);
  void set_ready();
  bool is_ready();
  static void on_tick(uv_timer_t* t);
  void drain();
  void maybe_close();
  void close_raft();
  bool stop_requested_now();

  // consensus/leadership.cc: who leads and this member's progress, as libraft reports them
  static Impl* of(struct raft_io* io) { return static_cast<Impl*>(static_cast<struct raft*>(io->data)->data); }
  static int start_hook(struct raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv);
  static void tick_hook(struct raft_io* io);
  static void recv_hook(struct raft_io* io, struct raft_message* msg);
  // Who leads as this member should say it (libraft's view, corrected for
  // a leader that already lost its term); tells note_role.
  struct LeaderView {
    raft_id leader_id = 0;
    bool leading = false;
  };
  LeaderView leader_view();
  void refresh_leader();
  void note_first_contact(const struct raft_message& msg);
  void note_caught_up();
  void note_role(bool leading);
  void update_progress();
  void update_progress_after_failure(int status);
  std::string leader_target();
  std::string peer_target(raft_id id) const;

  // consensus/proposals.cc: proposals batched into log entries, applied through the Fsm, answered
  void fail(uint64_t id, const Error& e);
  int on_fsm_apply(const struct raft_buffer* buf, void** result);
  static void on_applied(struct raft_apply* req, int status, void* /*result*/);
  void fail_pending(Pending& p, const Error& e);
  void propose_entries(std::vector<Pending>& batch);
  static int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result);

  // consensus/read_index.cc: barriers (reads, and the one a new term needs)
  static void on_barrier(struct raft_barrier* req, int status);

  // consensus/membership.cc: membership changes and leadership transfer (etcd's checks)
  int index_of(raft_id id) const;
  unsigned reachable_voters(raft_id except) const;
  unsigned count_role(int role) const;
  static Error change_error(int rv);
  static void on_change(struct raft_change* req, int status);
  ChangeReq* new_change(std::function<void(Error)> done);
  void start_assign(raft_id id, int role, std::function<void(Error)> done);
  void add_member(raft_id id, const std::string& address, bool learner, std::function<void(Error)> done);
  void promote_member(raft_id id, std::function<void(Error)> done);
  void remove_member(raft_id id, std::function<void(Error)> done);
  static void on_transfer(struct raft_transfer* req);
  void transfer_leadership(raft_id id, std::function<void(Error)> done);

  // ---- snapshots counted in commands (snapshots.cc) ------------------------------
  // --snapshot-count and --snapshot-catchup-entries count commands, as etcd
  // counts its entries (one request each); an entry of ours carries a batch
  // (about 15-20 under `benchmark put` load), so counted in entries the log
  // behind a snapshot held ~100k requests, which a lagging follower replayed
  // where etcd sends its database (issue #36). The commands of each command
  // entry applied since this start or the last install (libraft does not
  // hand barriers or configuration changes to the fsm: they count 0), and
  // the first index recorded: those below it count one command each.
  std::deque<std::pair<raft_index, uint32_t>> entry_commands;
  raft_index commands_recorded_from = 0;  // 0: nothing recorded yet
  uint64_t commands_since_snapshot = 0;
  // Fsm::log_floor at start: entries at or below it do not build the state
  // (a state restored from an etcd snapshot file), so no member may be sent
  // them. 0: every entry does.
  raft_index log_floor = 0;
  // True while libraft's log still holds an entry at or below log_floor: a
  // new member would be sent the log from there instead of a snapshot.
  bool log_holds_floor();
  // A stall of the consensus thread (the process paused or starved) longer
  // than an election timeout, seen by note_stall from the tick: until
  // no_snapshot_until a follower takes no snapshot of its own (fsm_snapshot
  // says RAFT_BUSY, libraft tries again at a later apply). Its appends
  // queued during the stall cross the snapshot threshold as it resumes, and
  // taking the snapshot (a memtable flush, on this thread) made libraft
  // refuse the leader's InstallSnapshot arriving meanwhile, which the
  // leader sent again only after the answer: 0.15-0.25 s of a paused
  // member's catch-up (bench/RESULTS.md, "Sixth pass").
  SteadyClock::time_point last_tick{};
  SteadyClock::time_point no_snapshot_until{};
  SteadyClock::time_point deferral_started{};  // the last window's start
  bool snapshot_deferral_logged = false;
  void note_stall(SteadyClock::time_point now);

  // consensus/snapshots.cc: libraft's snapshot hooks and installing another member's state
  Error install(const consensus::SnapshotMeta& meta);
  // Where the state for a snapshot may be fetched from (the taker first,
  // then the leader, then every other member), and which member each is.
  InstallPlan install_plan(const consensus::SnapshotMeta& meta);
  std::function<uint64_t(const std::string&)> member_at();
  // An InstallSnapshot message arrived (recv_hook): start fetching its state.
  void prefetch_state(const struct raft_message& msg);
  void note_applied_commands(raft_index index, uint32_t commands);
  unsigned catchup_entries(raft_index index);
  unsigned trailing_for(raft_index index);
  // At start: log_floor from the Fsm; a log that still holds entries at or
  // below it has libraft take a snapshot after the next entry it applies.
  void start_log_floor();
  static int fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n_bufs);
  static int fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf);
};

}  // namespace etcdq::consensus
