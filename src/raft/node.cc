#include "raft/node.h"

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <spdlog/spdlog.h>
#include <uv.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "apply/entry.h"
#include "common/executor.h"

namespace etcdq::raft {
namespace {

constexpr unsigned kTickMs = 10;
constexpr int kCompletionThreads = 2;
// libraft takes a snapshot (our cheap one: sync RocksDB's WAL) every this
// many entries and keeps this many behind it for slow followers.
constexpr unsigned kSnapshotThreshold = 8192;
constexpr unsigned kSnapshotTrailing = 2048;

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
  apply::Applier* applier;
  std::unique_ptr<Executor> completions;  // answers proposals off this thread
  uint64_t origin = 0;
  std::atomic<uint64_t> next_id{1};

  uv_loop_t loop{};
  uv_async_t wake{};
  uv_timer_t tick{};
  struct raft_io io {};
  struct raft_uv_transport transport {};
  struct raft raft {};
  struct raft_fsm fsm {};
  std::thread thread;

  struct Pending {
    uint64_t id;
    std::string bytes;
    ProposalDone done;
  };
  std::mutex mu;  // guards queue, reads, stop_requested
  std::vector<Pending> queue;
  std::vector<std::function<void(Error)>> reads;
  bool stop_requested = false;

  // Consensus thread only.
  std::unordered_map<uint64_t, ProposalDone> waiters;
  size_t inflight = 0;
  bool closing = false;
  bool startup_barrier_sent = false;

  std::mutex ready_mu;
  std::condition_variable ready_cv;
  bool ready = false;

  mutable std::mutex progress_mu;
  Progress progress;

  struct ApplyReq {
    struct raft_apply req;
    Impl* impl;
    std::vector<uint64_t> ids;
  };
  struct BarrierReq {
    struct raft_barrier req;
    Impl* impl;
    std::vector<std::function<void(Error)>> reads;
    bool startup;
  };

  // ---- consensus thread ----------------------------------------------------

  void update_progress() {
    Progress p;
    p.term = raft.current_term;
    raft_id lid = 0;
    const char* addr = nullptr;
    raft_leader(&raft, &lid, &addr);
    p.leader_id = lid;
    p.commit_index = raft.commit_index;
    p.applied_index = raft_last_applied(&raft);
    p.last_index = raft_last_index(&raft);
    p.is_leader = raft_state(&raft) == RAFT_LEADER;
    std::lock_guard<std::mutex> lock(progress_mu);
    progress = p;
  }

  void set_ready() {
    {
      std::lock_guard<std::mutex> lock(ready_mu);
      ready = true;
    }
    ready_cv.notify_all();
  }

  void complete(uint64_t id, apply::Result&& r) {
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
    Error e = applier->apply(index, std::string_view(static_cast<const char*>(buf->base), buf->len), &results);
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
      answers->emplace_back(std::move(it->second), std::move(r));
      waiters.erase(it);
    }
    if (!answers->empty()) {
      completions->post([answers] {
        for (auto& [done, r] : *answers) done(std::move(r));
      });
    }
    return 0;
  }

  static void on_applied(struct raft_apply* req, int status, void* /*result*/) {
    auto* a = static_cast<ApplyReq*>(req->data);
    Impl* self = a->impl;
    // On success apply already answered each proposal; anything left (and
    // everything on failure) never applied here.
    Error e = status == 0 ? errors::internal("proposal applied without a result")
                          : raft_error(status, "append");
    for (uint64_t id : a->ids) self->fail(id, e);
    delete a;
    --self->inflight;
    self->maybe_close();
  }

  static void on_barrier(struct raft_barrier* req, int status) {
    auto* b = static_cast<BarrierReq*>(req->data);
    Impl* self = b->impl;
    Error e = status == 0 ? Error() : raft_error(status, "barrier");
    if (b->startup) {
      if (status == 0) {
        self->update_progress();
        self->set_ready();
        spdlog::info("member {:x} is ready: applied index {}", self->opts->id, raft_last_applied(&self->raft));
      } else {
        self->startup_barrier_sent = false;  // try again at the next tick
      }
    }
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
    if (self->closing || self->is_ready()) return;
    // Ready once the log held at start is applied: as leader, after a
    // barrier of our own term commits.
    if (raft_state(&self->raft) == RAFT_LEADER && !self->startup_barrier_sent) {
      auto* b = new BarrierReq{};
      b->impl = self;
      b->startup = true;
      b->req.data = b;
      int rv = raft_barrier(&self->raft, &b->req, on_barrier);
      if (rv != 0) {
        delete b;
        return;
      }
      self->startup_barrier_sent = true;
      ++self->inflight;
    }
  }

  static void on_wake(uv_async_t* h) { static_cast<Impl*>(h->data)->drain(); }

  void drain() {
    std::vector<Pending> batch;
    std::vector<std::function<void(Error)>> rs;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(queue);
      rs.swap(reads);
      stopping = stop_requested;
    }
    if (stopping || closing) {
      for (auto& p : batch) {
        waiters.emplace(p.id, std::move(p.done));
        fail(p.id, errors::stopped());
      }
      for (auto& fn : rs) fn(errors::stopped());
      maybe_close();
      return;
    }
    bool leader = raft_state(&raft) == RAFT_LEADER;
    size_t i = 0;
    while (i < batch.size()) {
      std::string entry;
      auto* a = new ApplyReq{};
      a->impl = this;
      // Pack every pending proposal into as few entries as the size cap allows.
      do {
        apply::append_framed(&entry, batch[i].bytes);
        a->ids.push_back(batch[i].id);
        waiters.emplace(batch[i].id, std::move(batch[i].done));
        ++i;
      } while (i < batch.size() && entry.size() + batch[i].bytes.size() + 4 <= kMaxEntryBytes);
      apply::pad_entry(&entry);
      if (!leader) {
        for (uint64_t id : a->ids) fail(id, errors::no_leader());
        delete a;
        continue;
      }
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
        delete a;
        continue;
      }
      ++inflight;
      node->entries_proposed_.fetch_add(1, std::memory_order_relaxed);
      node->commands_proposed_.fetch_add(a->ids.size(), std::memory_order_relaxed);
    }
    if (!rs.empty()) {
      if (!leader) {
        for (auto& fn : rs) fn(errors::no_leader());
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
    raft.data = this;
    ::raft_close(&raft, [](struct raft* r) {
      Impl* self = static_cast<Impl*>(r->data);
      raft_uv_close(&self->io);
      raft_uv_tcp_close(&self->transport);
      uv_close(reinterpret_cast<uv_handle_t*>(&self->wake), nullptr);
      uv_close(reinterpret_cast<uv_handle_t*>(&self->tick), nullptr);
    });
  }

  // ---- fsm callbacks ---------------------------------------------------------

  static int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
    return static_cast<Impl*>(fsm->data)->on_fsm_apply(buf, result);
  }

  static int fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n_bufs) {
    Impl* self = static_cast<Impl*>(fsm->data);
    // libraft may drop log entries up to here once the snapshot is stored:
    // make the state database durable up to the applied index first.
    if (Error e = self->applier->make_durable()) {
      spdlog::error("snapshot skipped: {}", e.message());
      return RAFT_IOERR;
    }
    apply::SnapshotMeta meta;
    meta.set_applied_index(self->applier->applied_index());
    meta.set_revision(self->applier->revision());
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
    if (meta.applied_index() > self->applier->applied_index()) {
      // Our database is older than the snapshot: the state would have to be
      // copied from another member, which etcdq does not do yet.
      spdlog::error("snapshot at index {} is ahead of this member's state (applied index {})",
                    meta.applied_index(), self->applier->applied_index());
      return RAFT_IOERR;
    }
    raft_free(buf->base);  // the fsm owns it once restore succeeds
    return 0;
  }
};

Node::Node(NodeOptions opts, apply::Applier* applier) : opts_(std::move(opts)), impl_(new Impl{}) {
  impl_->node = this;
  impl_->opts = &opts_;
  impl_->applier = applier;
  impl_->completions = std::make_unique<Executor>(kCompletionThreads);
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
  if (int rv = raft_uv_tcp_init(&m->transport, &m->loop); rv != 0) {
    return errors::internal(std::string("cannot start the peer transport: ") + raft_strerror(rv));
  }
  if (!opts_.bind_address.empty() && opts_.bind_address != opts_.address) {
    raft_uv_tcp_set_bind_address(&m->transport, opts_.bind_address.c_str());
  }
  if (int rv = raft_uv_init(&m->io, &m->loop, opts_.dir.c_str(), &m->transport); rv != 0) {
    return errors::internal("cannot open the Raft log in " + opts_.dir + ": " + m->io.errmsg);
  }
  m->fsm.version = 1;
  m->fsm.data = m;
  m->fsm.apply = Impl::fsm_apply;
  m->fsm.snapshot = Impl::fsm_snapshot;
  m->fsm.restore = Impl::fsm_restore;
  if (int rv = raft_init(&m->raft, &m->io, &m->fsm, opts_.id, opts_.address.c_str()); rv != 0) {
    return errors::internal(std::string("cannot initialize Raft: ") + raft_errmsg(&m->raft));
  }
  struct raft_configuration conf;
  raft_configuration_init(&conf);
  for (const auto& p : opts_.initial_cluster) {
    raft_configuration_add(&conf, p.id, p.address.c_str(), RAFT_VOTER);
  }
  int rv = raft_bootstrap(&m->raft, &conf);
  raft_configuration_close(&conf);
  if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) {
    return errors::internal("cannot bootstrap the Raft log in " + opts_.dir + ": " + raft_strerror(rv) + " " +
                            raft_errmsg(&m->raft));
  }
  raft_set_heartbeat_timeout(&m->raft, opts_.heartbeat_ms);
  raft_set_election_timeout(&m->raft, opts_.election_ms);
  raft_set_snapshot_threshold(&m->raft, kSnapshotThreshold);
  raft_set_snapshot_trailing(&m->raft, kSnapshotTrailing);
  raft_set_pre_vote(&m->raft, true);
  if (int rv2 = raft_start(&m->raft); rv2 != 0) {
    return errors::internal("cannot start Raft on " + opts_.dir + ": " + raft_errmsg(&m->raft));
  }
  // The state database may never be ahead of the log that produced it: the
  // log was damaged, truncated or replaced. Serving would mean skipping new
  // entries as "already applied" (etcd refuses to start on a bad WAL too).
  if (raft_last_index(&m->raft) < m->applier->applied_index()) {
    return errors::internal("the Raft log in " + opts_.dir + " ends at index " +
                            std::to_string(raft_last_index(&m->raft)) + " but the state database has applied index " +
                            std::to_string(m->applier->applied_index()) +
                            ": the log is damaged or was replaced; restore the data dir from a backup");
  }
  uv_async_init(&m->loop, &m->wake, Impl::on_wake);
  m->wake.data = m;
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
  Impl::Pending p{id, cmd.SerializeAsString(), std::move(done)};
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

void Node::read_barrier(std::function<void(Error)> fn) {
  Impl* m = impl_.get();
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (m->stop_requested) {
      fn(errors::stopped());
      return;
    }
  }
  if (opts_.initial_cluster.size() == 1) {
    // One voter: it is the leader, and every acknowledged write is applied
    // before it is acknowledged, so the applied state is linearizable.
    Progress p = progress();
    fn(p.is_leader ? Error() : errors::no_leader());
    return;
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
