#include "raft/node.h"

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <spdlog/spdlog.h>
#include <uv.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "apply/entry.h"
#include "raft/snapshot_install.h"
#include "common/executor.h"

namespace etcdq::raft {
namespace {

constexpr unsigned kTickMs = 10;
constexpr int kCompletionThreads = 2;
// A follower forwards at most this many bytes of proposals in one call.
constexpr size_t kMaxForwardBytes = 1 << 20;

using SteadyClock = std::chrono::steady_clock;
// A snapshot install that found no member to send the state tries again
// after this, doubling up to kInstallRetryMax.
constexpr std::chrono::milliseconds kInstallRetryFirst{250};
constexpr std::chrono::milliseconds kInstallRetryMax{4000};

Error raft_error(int rv, const char* what) {
  switch (rv) {
    case RAFT_NOTLEADER: return errors::no_leader();
    case RAFT_LEADERSHIPLOST: return errors::leader_changed();
    case RAFT_SHUTDOWN:
    case RAFT_CANCELED: return errors::stopped();
    default: return errors::internal(std::string(what) + ": " + raft_strerror(rv));
  }
}

}  // namespace

struct Node::Impl {
  Node* node;
  NodeOptions* opts;
  Fsm* sm;  // the state machine (raft/fsm.h)
  std::unique_ptr<Executor> completions;  // answers proposals off this thread
  uint64_t origin = 0;
  std::atomic<uint64_t> next_id{1};

  uv_loop_t loop{};
  uv_async_t wake{};
  uv_timer_t tick{};
  std::unique_ptr<RaftIo> io;  // libraft's I/O (raft/io.h)
  struct raft raft {};
  struct raft_fsm fsm {};
  std::thread thread;

  std::shared_ptr<Forwarder> forwarder;

  // A proposal of ours (done set), or commands a follower forwarded, framed
  // already (forwarded_done set).
  struct Pending {
    uint64_t id = 0;
    std::string bytes;
    ProposalDone done;
    std::function<void(Error)> forwarded_done;
    bool framed = false;  // `bytes` carries its frame already
  };
  using ReadFn = std::function<void(Error)>;
  struct ReadIndexAnswer {
    uint64_t seq = 0;  // which call (an abandoned call's answer is ignored)
    Error error;
    uint64_t index = 0;
  };
  std::mutex mu;  // guards everything up to stop_requested
  std::vector<Pending> queue;
  std::vector<ReadFn> reads;
  std::vector<std::function<void(Error, uint64_t)>> index_reads;  // Peer.ReadIndex on the leader
  std::vector<std::function<void()>> tasks;  // run on the consensus thread
  bool stop_requested = false;

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

  // Consensus thread only.
  std::unordered_map<uint64_t, ProposalDone> waiters;
  std::deque<std::pair<SteadyClock::time_point, uint64_t>> forwarded_deadlines;
  // Our proposals that went (or wait to go) to a leader, framed, until they
  // are answered: a leader that turned out not to be one refused them
  // before proposing, so they are sent again; while no leader is known they
  // are held (etcd holds them too, until its request timeout).
  std::unordered_map<uint64_t, std::string> unanswered;
  std::vector<uint64_t> held;
  struct WaitingRead {
    SteadyClock::time_point deadline;
    ReadFn fn;
  };
  // Follower reads waiting for a read index call (held while no leader is
  // known, as etcd holds them, until their request timeout), and those of
  // the call in flight, to `read_index_leader`.
  std::vector<WaitingRead> follower_reads;
  std::vector<WaitingRead> read_index_batch;
  bool read_index_inflight = false;
  uint64_t read_index_seq = 0;
  raft_id read_index_leader = 0;
  std::multimap<uint64_t, WaitingRead> reads_waiting_apply;  // by read index
  size_t inflight = 0;
  bool closing = false;
  // A leader knows every committed index once an entry of its own term
  // committed (Raft's §6.4 rule for read indexes); a barrier gets it there.
  raft_term committed_term = 0;
  raft_term stepped_down_term = 0;  // a term in which libraft told us we lost leadership
  bool was_member = false;
  bool role_leading = false;  // what on_role_change was last told
  // Voters this leader added that are still spares: libraft gives up
  // promoting a member that does not start within its catch-up rounds, so
  // the promotion is retried (once a second) until it is a voter.
  std::set<raft_id> want_voter;
  SteadyClock::time_point next_promotion_try{};
  bool promoting = false;
  bool removed = false;
  raft_term term_barrier_term = 0;  // the term a barrier is out for
  raft_index members_config_index = ~0ULL;
  std::vector<MemberState> members_cache;  // guarded by progress_mu

  std::mutex ready_mu;
  std::condition_variable ready_cv;
  bool ready = false;

  mutable std::mutex progress_mu;
  Progress progress;

  struct ApplyReq {
    struct raft_apply req;
    Impl* impl;
    std::vector<uint64_t> ids;
    std::vector<std::function<void(Error)>> forwarded;
  };
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
  struct BarrierReq {
    struct raft_barrier req;
    Impl* impl;
    std::vector<std::function<void(Error)>> reads;
    raft_term term = 0;  // non-zero: the barrier that commits an entry of this term
  };

  // ---- consensus thread ----------------------------------------------------

  // libraft changes leader and term inside its own tick and message
  // callbacks; these wrappers refresh the leader fields right after, so a
  // Status never names a leader our own 10 ms tick has not caught up with.
  raft_io_tick_cb libraft_tick = nullptr;
  raft_io_recv_cb libraft_recv = nullptr;
  int (*uv_start)(struct raft_io*, unsigned, raft_io_tick_cb, raft_io_recv_cb) = nullptr;

  static Impl* of(struct raft_io* io) { return static_cast<Impl*>(static_cast<struct raft*>(io->data)->data); }
  static int start_hook(struct raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv) {
    Impl* self = of(io);
    self->libraft_tick = tick;
    self->libraft_recv = recv;
    return self->uv_start(io, msecs, tick_hook, recv_hook);
  }
  static void tick_hook(struct raft_io* io) {
    Impl* self = of(io);
    self->libraft_tick(io);
    self->refresh_leader();
  }
  static void recv_hook(struct raft_io* io, struct raft_message* msg) {
    Impl* self = of(io);
    self->libraft_recv(io, msg);
    self->refresh_leader();
  }
  void refresh_leader() {
    raft_id lid = 0;
    const char* addr = nullptr;
    raft_leader(&raft, &lid, &addr);
    bool leading = raft_state(&raft) == RAFT_LEADER && stepped_down_term != raft.current_term;
    if (lid == raft.id && !leading) lid = 0;
    note_role(leading);
    std::lock_guard<std::mutex> lock(progress_mu);
    if (progress.leader_id == lid && progress.term == raft.current_term && progress.is_leader == leading) return;
    progress.leader_id = lid;
    progress.term = raft.current_term;
    progress.is_leader = leading;
  }

  // Tells opts->on_role_change when this member starts or stops leading
  // (consensus thread; the callback must not block).
  void note_role(bool leading) {
    if (leading == role_leading) return;
    role_leading = leading;
    if (opts->on_role_change) opts->on_role_change(leading);
  }

  void update_progress() {
    Progress p;
    p.term = raft.current_term;
    raft_id lid = 0;
    const char* addr = nullptr;
    raft_leader(&raft, &lid, &addr);
    // libraft 0.15 fails a leader's requests with RAFT_LEADERSHIPLOST a
    // moment before it leaves the leader state, and may keep naming itself.
    bool leading = raft_state(&raft) == RAFT_LEADER && stepped_down_term != raft.current_term;
    if (lid == raft.id && !leading) lid = 0;
    note_role(leading);
    p.leader_id = lid;
    p.commit_index = raft.commit_index;
    p.applied_index = raft_last_applied(&raft);
    p.last_index = raft_last_index(&raft);
    p.is_leader = leading;
    std::vector<MemberState> ms;
    bool in_config = false;
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      in_config = in_config || raft.configuration.servers[i].id == raft.id;
      const auto& srv = raft.configuration.servers[i];
      MemberState m;
      m.id = srv.id;
      m.address = srv.address;
      m.voter = srv.role == RAFT_VOTER;
      m.learner = srv.role == RAFT_STANDBY;
      if (srv.id == raft.id) {
        p.is_learner = m.learner;
        m.match_index = raft_last_index(&raft);
        m.reachable = true;
      } else if (p.is_leader && raft.leader_state.progress != nullptr) {
        m.match_index = raft.leader_state.progress[i].match_index;
        m.reachable = raft.leader_state.progress[i].recent_recv;
      }
      ms.push_back(std::move(m));
    }
    {
      std::lock_guard<std::mutex> lock(progress_mu);
      progress = p;
      members_cache = std::move(ms);
    }
    // etcd stops a member once it is removed from the cluster. Once a
    // removal committed, not while a joining member has no configuration yet.
    if (in_config) was_member = true;
    if (was_member && !in_config && raft.configuration_index > 0 && raft.configuration_uncommitted_index == 0 &&
        !removed) {
      removed = true;
      spdlog::warn("member {:x} was removed from the cluster; stopping", raft.id);
      if (opts->on_removed) opts->on_removed();
    }
  }

  // libraft fails a leader's requests before it leaves the leader state:
  // whoever hears of the failure must not then see us named as leader.
  void update_progress_after_failure(int status) {
    if (status == RAFT_LEADERSHIPLOST) stepped_down_term = raft.current_term;
    update_progress();
  }

  // Reads whose read index is applied now go to the completion threads.
  void release_reads(uint64_t applied) {
    if (reads_waiting_apply.empty() || reads_waiting_apply.begin()->first > applied) return;
    auto ready = std::make_shared<std::vector<ReadFn>>();
    auto end = reads_waiting_apply.upper_bound(applied);
    for (auto it = reads_waiting_apply.begin(); it != end; ++it) ready->push_back(std::move(it->second.fn));
    reads_waiting_apply.erase(reads_waiting_apply.begin(), end);
    completions->post([ready] {
      for (auto& fn : *ready) fn(Error());
    });
  }

  // Forwarded proposals and reads that ran out of time.
  void expire(SteadyClock::time_point now) {
    while (!forwarded_deadlines.empty() && forwarded_deadlines.front().first <= now) {
      fail(forwarded_deadlines.front().second, errors::timeout());
      forwarded_deadlines.pop_front();
    }
    for (auto it = follower_reads.begin(); it != follower_reads.end();) {
      if (it->deadline <= now) {
        ReadFn fn = std::move(it->fn);
        it = follower_reads.erase(it);
        completions->post([fn = std::move(fn)] { fn(errors::timeout()); });
      } else {
        ++it;
      }
    }
    for (auto it = reads_waiting_apply.begin(); it != reads_waiting_apply.end();) {
      if (it->second.deadline <= now) {
        ReadFn fn = std::move(it->second.fn);
        it = reads_waiting_apply.erase(it);
        completions->post([fn = std::move(fn)] { fn(errors::timeout()); });
      } else {
        ++it;
      }
    }
  }

  // The leader's peer host:port (from libraft's configuration), "" when no
  // leader is known or we lead.
  std::string leader_target() {
    raft_id lid = 0;
    const char* addr = nullptr;
    raft_leader(&raft, &lid, &addr);
    if (lid == 0 || lid == raft.id || raft_state(&raft) != RAFT_FOLLOWER || addr == nullptr) return "";
    return addr;
  }

  // A member's peer host:port from libraft's configuration, "" if unknown.
  std::string peer_target(raft_id id) const {
    int i = index_of(id);
    if (i < 0 || raft.configuration.servers[i].address == nullptr) return "";
    return raft.configuration.servers[i].address;
  }

  void set_ready() {
    {
      std::lock_guard<std::mutex> lock(ready_mu);
      ready = true;
    }
    ready_cv.notify_all();
  }

  void complete(uint64_t id, apply::Result&& r) {
    unanswered.erase(id);
    auto it = waiters.find(id);
    if (it == waiters.end()) return;
    ProposalDone done = std::move(it->second);
    waiters.erase(it);
    done(std::move(r));
  }

  void fail(uint64_t id, const Error& e) {
    apply::Result r;
    r.error = e;
    complete(id, std::move(r));
  }

  int on_fsm_apply(const struct raft_buffer* buf, void** result) {
    *result = nullptr;
    uint64_t index = raft_last_applied(&raft) + 1;
    std::vector<apply::Result> results;
    Error e = sm->apply(index, std::string_view(static_cast<const char*>(buf->base), buf->len), &results);
    if (e) {
      // The state database failed: continuing would serve a state that no
      // longer follows the log. Stop hard; a restart re-applies from the log.
      spdlog::critical("apply of log entry {} failed, stopping: {}", index, e.message());
      std::_Exit(70);
    }
    // Answer this entry's proposals on the completion threads.
    auto answers = std::make_shared<std::vector<std::pair<ProposalDone, apply::Result>>>();
    for (auto& r : results) {
      if (r.origin != origin) continue;
      auto it = waiters.find(r.proposal_id);
      if (it == waiters.end()) continue;
      unanswered.erase(r.proposal_id);
      answers->emplace_back(std::move(it->second), std::move(r));
      waiters.erase(it);
    }
    if (!answers->empty()) {
      completions->post([answers] {
        for (auto& [done, r] : *answers) done(std::move(r));
      });
    }
    release_reads(index);
    return 0;
  }

  static void on_applied(struct raft_apply* req, int status, void* /*result*/) {
    auto* a = static_cast<ApplyReq*>(req->data);
    Impl* self = a->impl;
    // On success apply already answered each proposal; anything left (and
    // everything on failure) never applied here.
    // A failure may mean we stepped down: clients that hear of it must not
    // then see us reported as leader.
    if (status != 0) self->update_progress_after_failure(status);
    Error e = status == 0 ? errors::internal("proposal applied without a result")
                          : raft_error(status, "append");
    for (uint64_t id : a->ids) self->fail(id, e);
    Error fe = status == 0 ? Error() : raft_error(status, "append");
    for (auto& done : a->forwarded) done(fe);
    bool nudge = status == 0 && !a->forwarded.empty() && self->inflight == 1;
    delete a;
    --self->inflight;
    // The followers that forwarded these answer once they apply them, and
    // libraft tells followers the commit index only with the next append
    // (a heartbeat away when idle). With nothing else in flight, an empty
    // barrier carries it at once.
    if (nudge) self->send_commit_nudge();
    self->maybe_close();
  }

  void send_commit_nudge() {
    if (closing || raft_state(&raft) != RAFT_LEADER) return;
    auto* b = new BarrierReq{};
    b->impl = this;
    b->req.data = b;
    if (raft_barrier(&raft, &b->req, on_barrier) != 0) {
      delete b;
      return;
    }
    ++inflight;
  }

  static void on_barrier(struct raft_barrier* req, int status) {
    auto* b = static_cast<BarrierReq*>(req->data);
    Impl* self = b->impl;
    if (status != 0) self->update_progress_after_failure(status);
    Error e = status == 0 ? Error() : raft_error(status, "barrier");
    if (b->term != 0) {
      if (status == 0) {
        self->committed_term = b->term;
        self->update_progress();
        if (!self->is_ready()) {
          self->set_ready();
          spdlog::info("member {:x} is ready: applied index {}", self->opts->id, raft_last_applied(&self->raft));
        }
      } else {
        self->term_barrier_term = 0;  // try again at the next tick
      }
    }
    if (!b->reads.empty()) self->update_progress();  // read_index answers the applied index
    for (auto& fn : b->reads) fn(e);
    delete b;
    --self->inflight;
    self->maybe_close();
  }

  bool is_ready() {
    std::lock_guard<std::mutex> lock(ready_mu);
    return ready;
  }

  static void on_tick(uv_timer_t* t) {
    Impl* self = static_cast<Impl*>(t->data);
    self->update_progress();
    self->release_reads(raft_last_applied(&self->raft));
    self->expire(SteadyClock::now());
    if (self->closing) return;
    self->flush_held();
    self->abandon_read_index_if_stale();
    if (raft_state(&self->raft) == RAFT_FOLLOWER) {
      self->send_read_index();
    } else if (raft_state(&self->raft) == RAFT_LEADER && !self->follower_reads.empty()) {
      uv_async_send(&self->wake);  // drain() serves them with a barrier of ours
    }
    self->try_promotions(SteadyClock::now());
    // Ready (at start) once the log held then is applied: as leader, after
    // a barrier of our own term commits. Every new term gets one too.
    if (raft_state(&self->raft) == RAFT_LEADER && self->committed_term != self->raft.current_term &&
        self->term_barrier_term != self->raft.current_term) {
      auto* b = new BarrierReq{};
      b->impl = self;
      b->term = self->raft.current_term;
      b->req.data = b;
      if (raft_barrier(&self->raft, &b->req, on_barrier) != 0) {
        delete b;
        return;
      }
      self->term_barrier_term = b->term;
      ++self->inflight;
    }
    if (self->is_ready()) return;
    if (raft_state(&self->raft) == RAFT_FOLLOWER) {
      // A follower is ready once it knows a leader and applied what it
      // knows to be committed.
      raft_id lid = 0;
      const char* addr = nullptr;
      raft_leader(&self->raft, &lid, &addr);
      if (lid != 0 && self->raft.commit_index > 0 && raft_last_applied(&self->raft) >= self->raft.commit_index) {
        self->set_ready();
        spdlog::info("member {:x} is ready as a follower of {:x}: applied index {}", self->opts->id, lid,
                     raft_last_applied(&self->raft));
      }
      return;
    }
  }

  static void on_wake(uv_async_t* h) { static_cast<Impl*>(h->data)->drain(); }

  void drain() {
    std::vector<Pending> batch;
    std::vector<ReadFn> rs;
    std::vector<std::function<void(Error, uint64_t)>> irs;
    std::vector<std::function<void()>> ts;
    std::vector<std::pair<std::vector<uint64_t>, Error>> ffails;
    std::vector<ReadIndexAnswer> answers;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(queue);
      rs.swap(reads);
      irs.swap(index_reads);
      ts.swap(tasks);
      stopping = stop_requested;
    }
    {
      std::lock_guard<std::mutex> lock(inbox->mu);
      ffails.swap(inbox->forward_failures);
      answers.swap(inbox->answers);
    }
    for (auto& [ids, e] : ffails) {
      for (uint64_t id : ids) {
        if (e == errors::not_leader() && waiters.count(id)) {
          held.push_back(id);  // refused unproposed: send to the new leader
        } else {
          fail(id, e);
        }
      }
    }
    for (auto& a : answers) on_read_index(std::move(a));
    if (stopping || closing) {
      for (auto& p : batch) fail_pending(p, errors::stopped());
      // Ours that went to a leader (or wait for one) will not be applied here.
      std::vector<uint64_t> sent;
      for (const auto& [id, bytes] : unanswered) sent.push_back(id);
      for (uint64_t id : sent) fail(id, errors::stopped());
      held.clear();
      for (auto& fn : rs) fn(errors::stopped());
      for (auto& fn : irs) fn(errors::stopped(), 0);
      for (auto& w : follower_reads) w.fn(errors::stopped());
      follower_reads.clear();
      for (auto& w : read_index_batch) w.fn(errors::stopped());
      read_index_batch.clear();
      for (auto& [idx, w] : reads_waiting_apply) w.fn(errors::stopped());
      reads_waiting_apply.clear();
      for (auto& t : ts) t();  // membership tasks see `closing` and fail
      maybe_close();
      return;
    }
    for (auto& t : ts) t();
    bool leader = raft_state(&raft) == RAFT_LEADER;
    if (leader) {
      propose_entries(batch);
    } else {
      forward(batch);
    }
    // Held proposals go out on the tick (every 10 ms): a leader that cannot
    // be reached is not retried in a tight loop.
    for (auto& fn : irs) {
      if (!leader) {
        fn(errors::not_leader(), 0);
        continue;
      }
      // The read index is the commit index now, once the barrier below
      // confirms we still lead; before an entry of this term committed,
      // the barrier's own index.
      uint64_t commit = committed_term == raft.current_term ? raft.commit_index : 0;
      rs.push_back([this, commit, fn = std::move(fn)](Error e) {
        fn(e, e ? 0 : (commit != 0 ? commit : raft_last_applied(&raft)));
      });
    }
    if (leader) {
      // Reads queued for a read index before this member became leader.
      for (auto& w : follower_reads) rs.push_back(std::move(w.fn));
      follower_reads.clear();
    }
    if (!rs.empty()) {
      if (!leader) {
        auto deadline = SteadyClock::now() + std::chrono::milliseconds(opts->request_timeout_ms());
        for (auto& fn : rs) follower_reads.push_back(WaitingRead{deadline, std::move(fn)});
      } else {
        // One barrier confirms leadership for every read waiting now.
        auto* b = new BarrierReq{};
        b->impl = this;
        b->reads = std::move(rs);
        b->req.data = b;
        int rv = raft_barrier(&raft, &b->req, on_barrier);
        if (rv != 0) {
          for (auto& fn : b->reads) fn(raft_error(rv, "read barrier"));
          delete b;
        } else {
          ++inflight;
        }
      }
    }
    send_read_index();
  }

  void fail_pending(Pending& p, const Error& e) {
    if (p.forwarded_done) {
      p.forwarded_done(e);
    } else if (p.done) {
      apply::Result r;
      r.error = e;
      p.done(std::move(r));
    }
  }

  // Leader: pack every pending proposal into as few entries as the size cap allows.
  void propose_entries(std::vector<Pending>& batch) {
    size_t i = 0;
    while (i < batch.size()) {
      std::string entry;
      auto* a = new ApplyReq{};
      a->impl = this;
      do {
        Pending& p = batch[i];
        if (p.forwarded_done) {
          entry += p.bytes;  // framed by the follower
          a->forwarded.push_back(std::move(p.forwarded_done));
        } else if (p.framed) {
          entry += p.bytes;
          a->ids.push_back(p.id);
          waiters.emplace(p.id, std::move(p.done));
        } else {
          apply::append_framed(&entry, p.bytes);
          a->ids.push_back(p.id);
          waiters.emplace(p.id, std::move(p.done));
        }
        ++i;
      } while (i < batch.size() && entry.size() + batch[i].bytes.size() + 4 <= kMaxEntryBytes);
      apply::pad_entry(&entry);
      struct raft_buffer buf;
      buf.len = entry.size();
      buf.base = raft_malloc(buf.len);
      std::memcpy(buf.base, entry.data(), buf.len);
      a->req.data = a;
      int rv = raft_apply(&raft, &a->req, &buf, 1, on_applied);
      if (rv != 0) {
        raft_free(buf.base);
        Error e = raft_error(rv, "propose");
        for (uint64_t id : a->ids) fail(id, e);
        for (auto& done : a->forwarded) done(e);
        delete a;
        continue;
      }
      ++inflight;
      node->entries_proposed_.fetch_add(1, std::memory_order_relaxed);
      node->commands_proposed_.fetch_add(a->ids.size() + a->forwarded.size(), std::memory_order_relaxed);
    }
  }

  // Follower: hand our proposals to the leader; they are answered when this
  // member applies them (or fail on error or timeout).
  void forward(std::vector<Pending>& batch) {
    if (batch.empty()) return;
    auto deadline = SteadyClock::now() + std::chrono::milliseconds(opts->request_timeout_ms());
    std::vector<uint64_t> ids;
    for (auto& p : batch) {
      if (p.forwarded_done) {
        // Sent to us as the leader, but we no longer are.
        p.forwarded_done(errors::leader_changed());
        continue;
      }
      std::string framed;
      apply::append_framed(&framed, p.bytes);
      unanswered.emplace(p.id, std::move(framed));
      waiters.emplace(p.id, std::move(p.done));
      forwarded_deadlines.emplace_back(deadline, p.id);
      ids.push_back(p.id);
    }
    send_to_leader(ids);
  }

  // Sends `ids` (in `unanswered`) to the leader, or holds them while none is known.
  void send_to_leader(const std::vector<uint64_t>& ids) {
    std::string target = leader_target();
    if (target.empty()) {
      held.insert(held.end(), ids.begin(), ids.end());
      return;
    }
    auto timeout = std::chrono::milliseconds(opts->request_timeout_ms());
    std::vector<std::string> cmds;
    std::vector<uint64_t> call_ids;
    size_t bytes = 0;
    auto send = [&] {
      if (call_ids.empty()) return;
      std::weak_ptr<Inbox> weak = inbox;
      forwarder->propose(target, std::move(cmds), timeout, [weak, call_ids](Error e) {
        if (!e) return;  // answered when applied here
        if (auto in = weak.lock()) in->post_failure(call_ids, e);
      });
      cmds.clear();
      call_ids.clear();
      bytes = 0;
    };
    for (uint64_t id : ids) {
      auto it = unanswered.find(id);
      if (it == unanswered.end()) continue;
      // Under the leader's gRPC message limit: a call carries either at
      // most kMaxForwardBytes or one (large) command.
      if (bytes + it->second.size() > kMaxForwardBytes) send();
      bytes += it->second.size();
      cmds.push_back(it->second);
      call_ids.push_back(id);
    }
    send();
  }

  // Proposals held while no leader was known: to the leader now, or
  // proposed here if we lead.
  void flush_held() {
    if (held.empty()) return;
    if (raft_state(&raft) == RAFT_LEADER) {
      std::vector<Pending> batch;
      for (uint64_t id : held) {
        auto w = waiters.find(id);
        auto b = unanswered.find(id);
        if (w == waiters.end() || b == unanswered.end()) continue;
        Pending p;
        p.id = id;
        p.bytes = std::move(b->second);
        p.framed = true;
        p.done = std::move(w->second);
        unanswered.erase(b);
        waiters.erase(w);
        batch.push_back(std::move(p));
      }
      held.clear();
      propose_entries(batch);
      return;
    }
    if (leader_target().empty()) return;
    std::vector<uint64_t> ids;
    ids.swap(held);
    send_to_leader(ids);
  }

  // Follower: ask the leader for a read index for every read waiting now.
  // With no leader known they wait (expire() times them out).
  void send_read_index() {
    if (read_index_inflight || follower_reads.empty()) return;
    std::string target = leader_target();
    if (target.empty()) return;
    raft_id lid = 0;
    const char* addr = nullptr;
    raft_leader(&raft, &lid, &addr);
    read_index_inflight = true;
    read_index_leader = lid;
    uint64_t seq = ++read_index_seq;
    read_index_batch = std::move(follower_reads);
    follower_reads.clear();
    std::weak_ptr<Inbox> weak = inbox;
    forwarder->read_index(target, std::chrono::milliseconds(opts->request_timeout_ms()),
                          [weak, seq](Error e, uint64_t index) {
                            if (auto in = weak.lock()) in->post_answer(ReadIndexAnswer{seq, e, index});
                          });
  }

  // The leader changed while a read index call was out: its reads go to the
  // new leader (reads are safe to ask for again).
  void abandon_read_index_if_stale() {
    if (!read_index_inflight) return;
    raft_id lid = 0;
    const char* addr = nullptr;
    raft_leader(&raft, &lid, &addr);
    if (lid == read_index_leader && raft_state(&raft) == RAFT_FOLLOWER) return;
    read_index_inflight = false;
    ++read_index_seq;
    for (auto& w : read_index_batch) follower_reads.push_back(std::move(w));
    read_index_batch.clear();
  }

  static bool retryable(const Error& e) {
    return e == errors::leader_changed() || e == errors::not_leader() || e == errors::no_leader();
  }

  void on_read_index(ReadIndexAnswer&& a) {
    if (!read_index_inflight || a.seq != read_index_seq) return;  // abandoned
    read_index_inflight = false;
    std::vector<WaitingRead> batch = std::move(read_index_batch);
    read_index_batch.clear();
    if (a.error && retryable(a.error)) {
      for (auto& w : batch) follower_reads.push_back(std::move(w));
      return;
    }
    if (a.error) {
      auto fns = std::make_shared<std::vector<WaitingRead>>(std::move(batch));
      completions->post([fns, e = a.error] {
        for (auto& w : *fns) w.fn(e);
      });
      return;
    }
    for (auto& w : batch) reads_waiting_apply.emplace(a.index, std::move(w));
    release_reads(raft_last_applied(&raft));
  }

  void maybe_close() {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = stop_requested;
    }
    if (!stopping || closing || inflight > 0) return;
    closing = true;
    // Not from inside a libraft callback: libraft 0.15 aborts if raft_close
    // runs there, so defer to the next loop iteration via the timer.
    uv_timer_stop(&tick);
    uv_timer_start(
        &tick, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->close_raft(); }, 0, 0);
  }

  void close_raft() {
    note_role(false);
    raft.data = this;
    ::raft_close(&raft, [](struct raft* r) {
      Impl* self = static_cast<Impl*>(r->data);
      self->io->close();
      {
        std::lock_guard<std::mutex> lock(self->inbox->mu);
        self->inbox->wake = nullptr;
      }
      uv_close(reinterpret_cast<uv_handle_t*>(&self->wake), nullptr);
      uv_close(reinterpret_cast<uv_handle_t*>(&self->tick), nullptr);
    });
  }

  // ---- membership (consensus thread) ------------------------------------------

  int index_of(raft_id id) const {
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      if (raft.configuration.servers[i].id == id) return static_cast<int>(i);
    }
    return -1;
  }

  // Voters that heard from us within an election timeout, us included.
  unsigned reachable_voters(raft_id except) const {
    unsigned n = 0;
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      const auto& srv = raft.configuration.servers[i];
      if (srv.role != RAFT_VOTER || srv.id == except) continue;
      if (srv.id == raft.id || raft.leader_state.progress[i].recent_recv) ++n;
    }
    return n;
  }

  unsigned count_role(int role) const {
    unsigned n = 0;
    for (unsigned i = 0; i < raft.configuration.n; ++i) n += raft.configuration.servers[i].role == role;
    return n;
  }

  static Error change_error(int rv) {
    if (rv == RAFT_NOTLEADER) return errors::not_leader();
    if (rv == RAFT_CANTCHANGE) return errors::unhealthy();  // another change is still being applied
    if (rv == RAFT_LEADERSHIPLOST) return errors::leader_changed();
    return errors::internal(std::string("membership change: ") + raft_strerror(rv));
  }

  static void on_change(struct raft_change* req, int status) {
    auto* c = static_cast<ChangeReq*>(req->data);
    Impl* self = c->impl;
    --self->inflight;
    self->update_progress();
    if (status == 0 && c->then) {
      c->then(self);
    } else if (c->done) {
      c->done(status == 0 ? Error() : change_error(status));
    }
    delete c;
    self->maybe_close();
  }

  ChangeReq* new_change(std::function<void(Error)> done) {
    auto* c = new ChangeReq{};
    c->impl = this;
    c->done = std::move(done);
    c->req.data = c;
    return c;
  }

  void start_assign(raft_id id, int role, std::function<void(Error)> done) {
    ChangeReq* c = new_change(std::move(done));
    int rv = raft_assign(&raft, &c->req, id, role, on_change);
    if (rv != 0) {
      if (c->done) c->done(change_error(rv));
      delete c;
      return;
    }
    ++inflight;
  }

  // etcd's checks (server/etcdserver/server.go mayAddMember,
  // mayRemoveMember, isLearnerReady), with libraft's view of which members
  // are reachable.
  void add_member(raft_id id, const std::string& address, bool learner, std::function<void(Error)> done) {
    if (closing) return done(errors::stopped());
    if (raft_state(&raft) != RAFT_LEADER) return done(errors::not_leader());
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      if (address == raft.configuration.servers[i].address) return done(errors::peer_url_exist());
    }
    if (index_of(id) >= 0) return done(errors::member_exist());
    if (learner && count_role(RAFT_STANDBY) >= 1) return done(errors::too_many_learners());
    if (!learner && opts->strict_reconfig_check) {
      unsigned voters = count_role(RAFT_VOTER) + 1;
      if (reachable_voters(0) < voters / 2 + 1) return done(errors::unhealthy());
    }
    ChangeReq* c = new_change(std::move(done));
    // Added as a spare; then the role. A learner is answered once it is a
    // standby. A voter is answered now: libraft promotes it once it caught
    // up, which needs the new member running (etcd answers MemberAdd before
    // the member starts, too).
    auto user_done = c->done;
    c->then = [id, learner, user_done](Impl* self) {
      if (learner) {
        self->start_assign(id, RAFT_STANDBY, user_done);
      } else {
        user_done(Error());
        self->want_voter.insert(id);
        self->try_promotions(SteadyClock::now());
      }
    };
    int rv = raft_add(&raft, &c->req, id, address.c_str(), on_change);
    if (rv != 0) {
      c->done(change_error(rv));
      delete c;
      return;
    }
    ++inflight;
  }

  void try_promotions(SteadyClock::time_point now) {
    if (want_voter.empty() || promoting || now < next_promotion_try) return;
    if (raft_state(&raft) != RAFT_LEADER) {
      want_voter.clear();  // a new leader does not know them; MemberPromote does not apply to spares
      return;
    }
    next_promotion_try = now + std::chrono::seconds(1);
    for (auto it = want_voter.begin(); it != want_voter.end();) {
      int i = index_of(*it);
      if (i < 0 || raft.configuration.servers[i].role == RAFT_VOTER) {
        it = want_voter.erase(it);
        continue;
      }
      if (raft.configuration.servers[i].role != RAFT_SPARE) {
        ++it;
        continue;
      }
      raft_id id = *it;
      promoting = true;
      start_assign(id, RAFT_VOTER, [this, id](Error e) {
        promoting = false;
        if (e) spdlog::info("member {:x} is not a voter yet (retrying): {}", id, e.message());
      });
      return;
    }
  }

  void promote_member(raft_id id, std::function<void(Error)> done) {
    if (closing) return done(errors::stopped());
    if (raft_state(&raft) != RAFT_LEADER) return done(errors::not_leader());
    int i = index_of(id);
    if (i < 0) return done(errors::member_not_found());
    if (raft.configuration.servers[i].role != RAFT_STANDBY) return done(errors::member_not_learner());
    // etcd: the learner's match index is at least 90% of the leader's.
    uint64_t match = raft.leader_state.progress[i].match_index;
    if (static_cast<double>(match) < 0.9 * static_cast<double>(raft_last_index(&raft))) {
      return done(errors::learner_not_ready());
    }
    start_assign(id, RAFT_VOTER, std::move(done));
  }

  void remove_member(raft_id id, std::function<void(Error)> done) {
    if (closing) return done(errors::stopped());
    if (raft_state(&raft) != RAFT_LEADER) return done(errors::not_leader());
    int i = index_of(id);
    if (i < 0) return done(errors::member_not_found());
    if (raft.configuration.servers[i].role == RAFT_VOTER && opts->strict_reconfig_check) {
      unsigned voters = count_role(RAFT_VOTER) - 1;
      if (voters == 0 || reachable_voters(id) < voters / 2 + 1) return done(errors::not_enough_started());
    }
    if (id != raft.id) {
      // The removed member stops getting the log, so it would never see
      // this commit: tell it (etcd's removed member learns it from its peers).
      std::string removed_target = peer_target(id);
      done = [this, id, removed_target, done = std::move(done)](Error e) {
        if (!e && !removed_target.empty()) forwarder->removed(removed_target, id);
        done(e);
      };
    }
    ChangeReq* c = new_change(std::move(done));
    int rv = raft_remove(&raft, &c->req, id, on_change);
    if (rv != 0) {
      c->done(change_error(rv));
      delete c;
      return;
    }
    ++inflight;
  }

  static void on_transfer(struct raft_transfer* req) {
    auto* t = static_cast<TransferReq*>(req->data);
    raft_id lid = 0;
    const char* addr = nullptr;
    raft_leader(&t->impl->raft, &lid, &addr);
    t->impl->update_progress();
    t->done(lid == t->target ? Error() : errors::timeout());
    --t->impl->inflight;
    Impl* self = t->impl;
    delete t;
    self->maybe_close();
  }

  void transfer_leadership(raft_id id, std::function<void(Error)> done) {
    if (closing) return done(errors::stopped());
    if (raft_state(&raft) != RAFT_LEADER) return done(errors::not_leader());
    if (id == raft.id) return done(Error());
    int i = index_of(id);
    if (i < 0 || raft.configuration.servers[i].role != RAFT_VOTER) return done(errors::bad_leader_transferee());
    auto* t = new TransferReq{};
    t->impl = this;
    t->target = id;
    t->done = std::move(done);
    t->req.data = t;
    int rv = raft_transfer(&raft, &t->req, id, on_transfer);
    if (rv != 0) {
      t->done(rv == RAFT_BADID ? errors::bad_leader_transferee() : change_error(rv));
      delete t;
      return;
    }
    ++inflight;
  }

  // ---- snapshot install ------------------------------------------------------

  // Our state is older than a snapshot libraft installs: stream the state at
  // its index from the member that took it, replacing ours.
  Error install(const apply::SnapshotMeta& meta) {
    InstallPlan plan;
    plan.min_index = meta.applied_index();
    auto add = [&](const std::string& t) {
      if (!t.empty() && std::find(plan.targets.begin(), plan.targets.end(), t) == plan.targets.end()) {
        plan.targets.push_back(t);
      }
    };
    // The state is fetched over the Peer service on peer URLs: the taker's
    // first, then the leader's, then every other member's.
    add(peer_target(meta.source_member()));
    add(leader_target());
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      const auto& srv = raft.configuration.servers[i];
      if (srv.id != raft.id && srv.address != nullptr) add(srv.address);
    }
    if (!opts->install_plan_path.empty()) {
      if (Error e = write_plan(opts->install_plan_path, plan)) {
        // Without the plan a crash midway could not be recovered; and
        // libraft must not go on from this snapshot without its state.
        spdlog::critical("cannot record the snapshot install, stopping: {}", e.message());
        std::_Exit(70);
      }
    }
    spdlog::info("installing the snapshot at index {} (revision {}) taken by member {:x}", meta.applied_index(),
                 meta.revision(), meta.source_member());
    // Until some member can send the state: its peers may be restarting.
    // libraft must not go on from the snapshot's index without it (libraft
    // 0.15 does not undo a snapshot whose restore failed), so this thread
    // waits here; linearizable reads wait with it, serializable reads see
    // the old state. A failed attempt, even one that replaced part of the
    // state, is simply made again: restore starts from an empty state.
    auto backoff = kInstallRetryFirst;
    for (int attempt = 1;; ++attempt) {
      bool damaged = false;
      Error e = fetch_state(sm, *forwarder, plan, &damaged);
      if (!e) {
        if (!opts->install_plan_path.empty()) remove_plan(opts->install_plan_path);
        return {};
      }
      if (attempt == 1 || attempt % 10 == 0) {
        spdlog::warn("no member could send the state at index {} yet (attempt {}): {}; trying again",
                     meta.applied_index(), attempt, e.message());
      }
      auto until = SteadyClock::now() + backoff;
      while (SteadyClock::now() < until) {
        if (stop_requested_now()) {
          // Stopping cannot wait for peers that may never come back; the
          // plan makes the next start fetch the state before libraft runs.
          spdlog::warn("stopped while installing the snapshot at index {}; the next start fetches the state first",
                       meta.applied_index());
          spdlog::default_logger()->flush();
          std::_Exit(0);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      backoff = std::min(backoff * 2, kInstallRetryMax);
      // Members may have been added or moved since: ask every one we know.
      for (unsigned i = 0; i < raft.configuration.n; ++i) {
        const auto& srv = raft.configuration.servers[i];
        if (srv.id == raft.id || srv.address == nullptr) continue;
        if (std::find(plan.targets.begin(), plan.targets.end(), srv.address) == plan.targets.end()) {
          plan.targets.push_back(srv.address);
        }
      }
    }
  }

  bool stop_requested_now() {
    std::lock_guard<std::mutex> lock(mu);
    return stop_requested;
  }

  // ---- fsm callbacks ---------------------------------------------------------

  static int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
    return static_cast<Impl*>(fsm->data)->on_fsm_apply(buf, result);
  }

  static int fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n_bufs) {
    Impl* self = static_cast<Impl*>(fsm->data);
    // libraft may drop log entries up to here once the snapshot is stored:
    // the state machine makes itself durable and keeps the state first.
    apply::SnapshotMeta meta;
    if (Error e = self->sm->take_snapshot(&meta)) {
      spdlog::error("snapshot skipped: {}", e.message());
      return RAFT_IOERR;
    }
    meta.set_source_member(self->opts->id);
    std::string payload;
    apply::append_framed(&payload, meta.SerializeAsString());
    apply::pad_entry(&payload);
    auto* b = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
    if (b == nullptr) return RAFT_NOMEM;
    b->len = payload.size();
    b->base = raft_malloc(b->len);
    if (b->base == nullptr) {
      raft_free(b);
      return RAFT_NOMEM;
    }
    std::memcpy(b->base, payload.data(), b->len);
    *bufs = b;
    *n_bufs = 1;
    return 0;
  }

  static int fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf) {
    Impl* self = static_cast<Impl*>(fsm->data);
    std::string_view rest(static_cast<const char*>(buf->base), buf->len), bytes;
    bool corrupt = false;
    apply::SnapshotMeta meta;
    if (!apply::next_framed(&rest, &bytes, &corrupt) ||
        !meta.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      spdlog::error("cannot read a Raft snapshot's metadata");
      return RAFT_CORRUPT;
    }
    if (meta.applied_index() > self->sm->applied_index()) {
      if (Error e = self->install(meta)) {
        spdlog::error("cannot install the snapshot at index {}: {}", meta.applied_index(), e.message());
        return RAFT_IOERR;
      }
    }
    raft_free(buf->base);  // the fsm owns it once restore succeeds
    return 0;
  }
};

Node::Node(NodeOptions opts, Fsm* fsm) : opts_(std::move(opts)), impl_(new Impl{}) {
  impl_->node = this;
  impl_->opts = &opts_;
  impl_->sm = fsm;
  impl_->completions = std::make_unique<Executor>(kCompletionThreads);
  impl_->forwarder = opts_.forwarder ? opts_.forwarder : std::make_shared<Forwarder>();
  impl_->io = opts_.io ? opts_.io(&impl_->loop, impl_->forwarder) : grpc_uv_io(&impl_->loop, impl_->forwarder);
  std::random_device rd;
  do {
    impl_->origin = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  } while (impl_->origin == 0);
}

Node::~Node() { stop(); }

Error Node::start() {
  Impl* m = impl_.get();
  std::error_code ec;
  std::filesystem::create_directories(opts_.dir, ec);
  if (ec) return errors::internal("cannot create the Raft log directory " + opts_.dir + ": " + ec.message());
  if (uv_loop_init(&m->loop) != 0) return errors::internal("cannot start the event loop");
  // A start that fails part way closes what it opened, in reverse order, so
  // that the member exits with its error and nothing else (nothing leaks).
  // The transport (raft/transport.h) is closed by libraft with its I/O.
  enum { kLoop, kIo, kRaft } opened = kLoop;
  auto failed = [m, &opened](Error e) {
    if (opened == kRaft) {
      m->raft.data = m;
      ::raft_close(&m->raft, [](struct raft* r) {
        Impl* self = static_cast<Impl*>(r->data);
        self->io->close();
      });
    } else if (opened == kIo) {
      m->io->close();
    }
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_loop_close(&m->loop);
    return e;
  };
  if (Error e = m->io->open(opts_.dir)) return failed(e);
  opened = kIo;
  m->fsm.version = 1;
  m->fsm.data = m;
  m->fsm.apply = Impl::fsm_apply;
  m->fsm.snapshot = Impl::fsm_snapshot;
  m->fsm.restore = Impl::fsm_restore;
  if (int rv = raft_init(&m->raft, m->io->get(), &m->fsm, opts_.id, opts_.address.c_str()); rv != 0) {
    return failed(errors::internal(std::string("cannot initialize Raft: ") + raft_errmsg(&m->raft)));
  }
  opened = kRaft;
  m->raft.data = m;
  m->uv_start = m->io->get()->start;
  m->io->get()->start = Impl::start_hook;
  if (!opts_.join) {
    // A new cluster's members all bootstrap the same configuration; a log
    // that exists already keeps its own (RAFT_CANTBOOTSTRAP).
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    for (const auto& p : opts_.initial_cluster) {
      raft_configuration_add(&conf, p.id, p.address.c_str(), RAFT_VOTER);
    }
    int rv = raft_bootstrap(&m->raft, &conf);
    raft_configuration_close(&conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) {
      return failed(errors::internal("cannot bootstrap the Raft log in " + opts_.dir + ": " + raft_strerror(rv) +
                                     " " + raft_errmsg(&m->raft)));
    }
  }
  raft_set_heartbeat_timeout(&m->raft, opts_.heartbeat_ms);
  raft_set_election_timeout(&m->raft, opts_.election_ms);
  raft_set_snapshot_threshold(&m->raft, opts_.snapshot_threshold);
  raft_set_snapshot_trailing(&m->raft, opts_.snapshot_trailing);
  // libraft waits this long for a follower to answer a snapshot before it
  // sends it again (30 s by default: a follower that was down when one was
  // sent waited that long). Ours are metadata only, so resending is cheap;
  // a follower still installing the state finds it has it already.
  raft_set_install_snapshot_timeout(&m->raft, std::max(5000u, 5 * opts_.election_ms));
  raft_set_pre_vote(&m->raft, opts_.pre_vote);
  if (int rv2 = raft_start(&m->raft); rv2 != 0) {
    return failed(errors::internal("cannot start Raft on " + opts_.dir + ": " + raft_errmsg(&m->raft)));
  }
  // The state database may never be ahead of the log that produced it: the
  // log was damaged, truncated or replaced. Serving would mean skipping new
  // entries as "already applied" (etcd refuses to start on a bad WAL too).
  if (raft_last_index(&m->raft) < m->sm->applied_index() &&
      !m->sm->restored_ahead_of(raft_last_index(&m->raft))) {
    return failed(errors::internal(
        "the Raft log in " + opts_.dir + " ends at index " + std::to_string(raft_last_index(&m->raft)) +
        " but the state database has applied index " + std::to_string(m->sm->applied_index()) +
        ": the log is damaged or was replaced; restore the data dir from a backup"));
  }
  uv_async_init(&m->loop, &m->wake, Impl::on_wake);
  m->wake.data = m;
  m->inbox->wake = &m->wake;
  uv_timer_init(&m->loop, &m->tick);
  m->tick.data = m;
  uv_timer_start(&m->tick, Impl::on_tick, 0, kTickMs);
  m->thread = std::thread([m] {
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_loop_close(&m->loop);
  });
  return {};
}

bool Node::wait_ready(int timeout_ms) {
  std::unique_lock<std::mutex> lock(impl_->ready_mu);
  return impl_->ready_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return impl_->ready; });
}

void Node::propose(apply::Command cmd, ProposalDone done) {
  Impl* m = impl_.get();
  uint64_t id = m->next_id.fetch_add(1, std::memory_order_relaxed);
  cmd.set_origin(m->origin);
  cmd.set_proposal_id(id);
  if (cmd.time_ms() == 0) {
    cmd.set_time_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count());
  }
  Impl::Pending p{id, cmd.SerializeAsString(), std::move(done), nullptr};
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (!m->stop_requested) {
      m->queue.push_back(std::move(p));
      p.done = nullptr;
    }
  }
  if (p.done) {
    apply::Result r;
    r.error = errors::stopped();
    p.done(std::move(r));
    return;
  }
  uv_async_send(&m->wake);
}

void Node::propose_forwarded(std::vector<std::string> commands, std::function<void(Error)> done) {
  Impl* m = impl_.get();
  // The leader is the last member that can keep a bad command out of the
  // log: once committed, every member must apply it (as skipped). The Peer
  // service checks these too; a caller that skipped it must not get past.
  for (const auto& c : commands) {
    apply::Command cmd;
    Error e = apply::decode_forwarded(c, &cmd);
    if (!e) e = apply::check_command(cmd, opts_.command_limits, /*forwarded=*/true);
    if (e) {
      done(e);
      return;
    }
  }
  Impl::Pending p;
  for (auto& c : commands) p.bytes += c;
  p.forwarded_done = std::move(done);
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (!m->stop_requested) {
      m->queue.push_back(std::move(p));
      p.forwarded_done = nullptr;
    }
  }
  if (p.forwarded_done) {
    p.forwarded_done(errors::stopped());
    return;
  }
  uv_async_send(&m->wake);
}

void Node::read_barrier(std::function<void(Error)> fn) {
  Impl* m = impl_.get();
  Progress p = progress();
  if (p.is_leader) {
    size_t voters = 0;
    for (const auto& mem : members()) voters += mem.voter;
    if (voters == 1) {
      // The only voter leads, and every acknowledged write is applied before
      // it is acknowledged, so the applied state is linearizable.
      fn(Error());
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (m->stop_requested) {
      fn(errors::stopped());
      return;
    }
    m->reads.push_back(std::move(fn));
  }
  uv_async_send(&m->wake);
}

void Node::read_index(std::function<void(Error, uint64_t)> fn) {
  Impl* m = impl_.get();
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (!m->stop_requested) {
      m->index_reads.push_back(std::move(fn));
      fn = nullptr;
    }
  }
  if (fn) {
    fn(errors::stopped(), 0);
    return;
  }
  uv_async_send(&m->wake);
}

void Node::add_member(uint64_t id, std::string address, bool learner, std::function<void(Error)> done) {
  run_task([this, id, address = std::move(address), learner, done]() mutable {
    impl_->add_member(id, address, learner, std::move(done));
  }, done);
}

void Node::promote_member(uint64_t id, std::function<void(Error)> done) {
  run_task([this, id, done]() mutable { impl_->promote_member(id, std::move(done)); }, done);
}

void Node::remove_member(uint64_t id, std::function<void(Error)> done) {
  run_task([this, id, done]() mutable { impl_->remove_member(id, std::move(done)); }, done);
}

void Node::transfer_leadership(uint64_t id, std::function<void(Error)> done) {
  run_task([this, id, done]() mutable { impl_->transfer_leadership(id, std::move(done)); }, done);
}

void Node::run_task(std::function<void()> task, const std::function<void(Error)>& on_stopped) {
  Impl* m = impl_.get();
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (!m->stop_requested) {
      m->tasks.push_back(std::move(task));
      task = nullptr;
    }
  }
  if (task) {
    on_stopped(errors::stopped());
    return;
  }
  uv_async_send(&m->wake);
}

std::vector<MemberState> Node::members() const {
  std::lock_guard<std::mutex> lock(impl_->progress_mu);
  return impl_->members_cache;
}

void Node::removed_by_leader() {
  run_task(
      [this] {
        if (impl_->removed) return;
        impl_->removed = true;
        spdlog::warn("member {:x} was removed from the cluster (the leader says); stopping", opts_.id);
        if (opts_.on_removed) opts_.on_removed();
      },
      [](Error) {});
}

Forwarder& Node::forwarder() { return *impl_->forwarder; }

grpc::Service* Node::transport_service() { return impl_->io->service(); }

std::string Node::leader_target() const {
  Progress p = progress();
  if (p.leader_id == 0 || p.leader_id == opts_.id) return "";
  for (const auto& m : members()) {
    if (m.id == p.leader_id) return m.address;
  }
  return "";
}

std::string Node::leader_client_target() const {
  Progress p = progress();
  if (p.leader_id == 0 || p.leader_id == opts_.id || !opts_.client_target_of) return "";
  return opts_.client_target_of(p.leader_id);
}

void Node::stop() {
  Impl* m = impl_.get();
  if (!m->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(m->mu);
    m->stop_requested = true;
  }
  uv_async_send(&m->wake);
  m->thread.join();
  m->completions.reset();  // answers every proposal still queued
}

Progress Node::progress() const {
  std::lock_guard<std::mutex> lock(impl_->progress_mu);
  return impl_->progress;
}

}  // namespace etcdq::raft
