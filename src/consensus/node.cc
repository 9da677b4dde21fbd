// consensus::Node, the facade (consensus/node.h): callers' threads hand work to the
// consensus thread through the queues in Node::Impl (consensus/node_impl.h);
// start() opens libraft on the injected I/O and starts that thread.
#include "consensus/node.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "common/thread_name.h"
#include "consensus/metrics.h"
#include "consensus/node_impl.h"

namespace etcdq::consensus {

bool log_exists(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(dir) / "metadata1", ec) ||
         std::filesystem::exists(std::filesystem::path(dir) / "metadata2", ec);
}

Node::Node(NodeOptions opts, Fsm* fsm) : opts_(std::move(opts)), impl_(new Impl{}) {
  raft_metrics();  // shown at 0 from the start, as etcd's
  impl_->node = this;
  impl_->opts = &opts_;
  impl_->sm = fsm;
  impl_->completions = std::make_unique<Executor>(kCompletionThreads, "raft-answers");
  impl_->forwarder = opts_.forwarder ? opts_.forwarder : std::make_shared<Forwarder>();
  impl_->prefetch = std::make_unique<StatePrefetch>(fsm, impl_->forwarder.get());
  impl_->io = opts_.io ? opts_.io(&impl_->loop, impl_->forwarder) : peer_uv_io(&impl_->loop, impl_->forwarder);
  std::random_device rd;
  do {
    impl_->origin = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  } while (impl_->origin == 0);
}

Node::~Node() { stop(); }

void Node::set_answer_route(AnswerRoute route, std::function<void()> drain) {
  std::lock_guard<std::mutex> lock(impl_->route_mu);
  impl_->answer_route = std::move(route);
  impl_->answer_drain = std::move(drain);
}

Error Node::start() {
  Impl* m = impl_.get();
  std::error_code ec;
  std::filesystem::create_directories(opts_.dir, ec);
  if (ec) return errors::internal("cannot create the Raft log directory " + opts_.dir + ": " + ec.message());
  if (uv_loop_init(&m->loop) != 0) return errors::internal("cannot start the event loop");
  // A start that fails part way closes what it opened, in reverse order, so
  // that the member exits with its error and nothing else (nothing leaks).
  // The transport (consensus/transport.h) is closed by libraft with its I/O.
  enum { kLoop, kIo, kRaft } opened = kLoop;
  auto failed = [m, &opened](Error e) {
    if (opened == kRaft) ::raft_close(&m->raft, nullptr);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    // Only once the loop has ended (consensus/io.h, UvIo).
    if (opened != kLoop) m->io->close();
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
  forget_snapshots_sent(&m->raft);  // another node's, at this address before
  forget_answers(&m->raft);
  m->raft.data = m;
  // Raft messages only from the members of the configuration this member
  // knows (etcd's rafthttp refuses unknown senders). A member that knows
  // none yet (joining, before its first entries) takes any sender.
  m->io->set_sender_filter([m](raft_id from) {
    const struct raft_configuration& c = m->raft.configuration;
    if (c.n == 0) return true;
    for (unsigned i = 0; i < c.n; ++i) {
      if (c.servers[i].id == from) return true;
    }
    return false;
  });
  m->uv_start = m->io->get()->start;
  m->io->get()->start = Impl::start_hook;
  m->log_appends.install(m->io->get());
  if (opts_.force_new_cluster && log_exists(opts_.dir)) {
    // etcd's --force-new-cluster (NodeOptions): this member alone, after
    // everything the log holds.
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    raft_configuration_add(&conf, opts_.id, opts_.address.c_str(), RAFT_VOTER);
    int rv = raft_recover(&m->raft, &conf);
    raft_configuration_close(&conf);
    if (rv != 0) {
      return failed(errors::internal("--force-new-cluster: cannot rewrite the Raft configuration in " + opts_.dir +
                                     ": " + raft_strerror(rv) + " " + raft_errmsg(&m->raft)));
    }
    spdlog::warn("--force-new-cluster: the Raft configuration in {} is now this member alone ({:x} at {}); "
                 "do not start the other members with their old data",
                 opts_.dir, opts_.id, opts_.address);
  } else if (!opts_.join) {
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
  // a follower still installing the state finds it has it already. A
  // follower that dropped it (busy with a snapshot of its own) is sent it
  // again as soon as it answers a later heartbeat (libraft_patches.h, 7).
  raft_set_install_snapshot_timeout(&m->raft, std::max(5000u, 5 * opts_.election_ms));
  // A voter joins as a spare that libraft promotes once it has caught up
  // (consensus/promotions.h); libraft gives up a catch-up round that lasts
  // 5 s, and a spare gets no entries until the next try. A member added
  // under load, which starts, fetches a snapshot and applies the log, took
  // 7-12 s to serve (etcd: 1.7-1.9 s, issue #36): a round may last as long
  // as libraft would wait for the snapshot it sends.
  raft_set_max_catch_up_round_duration(&m->raft, std::max(30000u, 10 * opts_.election_ms));
  raft_set_pre_vote(&m->raft, opts_.pre_vote);
  if (int rv2 = raft_start(&m->raft); rv2 != 0) {
    return failed(errors::internal("cannot start Raft on " + opts_.dir + ": " + raft_errmsg(&m->raft)));
  }
  m->start_log_floor();
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
  // What a start after a crash applies again (storage::Durability::
  // kReplayed writes that were not flushed) once a leader says it is
  // committed; not said for a new member's first entry.
  if (raft_last_index(&m->raft) > std::max<uint64_t>(m->sm->applied_index(), 1)) {
    spdlog::info("the Raft log ends at index {}, the state database has applied index {}: up to {} entries to apply",
                 raft_last_index(&m->raft), m->sm->applied_index(),
                 raft_last_index(&m->raft) - m->sm->applied_index());
  }
  uv_async_init(&m->loop, &m->wake, Impl::on_wake);
  m->wake.data = m;
  m->inbox->wake = &m->wake;
  uv_timer_init(&m->loop, &m->tick);
  m->tick.data = m;
  uv_timer_start(&m->tick, Impl::on_tick, 0, kTickMs);
  m->log_appends.open(&m->loop);
  m->thread = std::thread([m] {
    set_thread_name("raft-loop");  // consensus and apply
    set_inline_writes(&m->log_appends);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    set_inline_writes(nullptr);
    m->io->close();  // only once the loop has ended (consensus/io.h, UvIo)
    uv_loop_close(&m->loop);
  });
  return {};
}

bool Node::wait_ready(int timeout_ms) {
  std::unique_lock<std::mutex> lock(impl_->ready_mu);
  return impl_->ready_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return impl_->ready; });
}

void Node::propose(const std::function<std::string(ProposalTag)>& encode, ProposalDone done) {
  Impl* m = impl_.get();
  uint64_t id = m->next_id.fetch_add(1, std::memory_order_relaxed);
  Impl::Pending p{id, encode(ProposalTag{m->origin, id}), std::move(done), nullptr};
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (!m->stop_requested) {
      m->queue.push_back(std::move(p));
      p.done = nullptr;
      m->wake_locked();
    }
  }
  if (p.done) p.done(errors::stopped(), nullptr);
}

void Node::propose_forwarded(std::vector<std::string> commands, std::function<void(Error)> done) {
  Impl* m = impl_.get();
  Impl::Pending p;
  for (auto& c : commands) p.bytes += c;
  p.forwarded_done = std::move(done);
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (!m->stop_requested) {
      m->queue.push_back(std::move(p));
      p.forwarded_done = nullptr;
      m->wake_locked();
    }
  }
  if (p.forwarded_done) p.forwarded_done(errors::stopped());
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
    m->wake_locked();
  }
}

void Node::read_index(std::function<void(Error, uint64_t)> fn) {
  Impl* m = impl_.get();
  {
    std::lock_guard<std::mutex> lock(m->mu);
    if (!m->stop_requested) {
      m->index_reads.push_back(std::move(fn));
      fn = nullptr;
      m->wake_locked();
    }
  }
  if (fn) fn(errors::stopped(), 0);
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
      m->wake_locked();
    }
  }
  if (task) on_stopped(errors::stopped());
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

void Node::adopt_peer_connection(int fd) { impl_->io->adopt(fd); }

std::string Node::leader_target() const {
  Progress p = progress();
  if (p.leader_id == 0 || p.leader_id == opts_.id) return "";
  for (const auto& m : members()) {
    if (m.id == p.leader_id) return m.address;
  }
  return "";
}

void Node::stop() {
  Impl* m = impl_.get();
  if (!m->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(m->mu);
    m->stop_requested = true;
    // Under the lock: a wake-up already pending could otherwise let the
    // loop see stop_requested, close and end before this send.
    m->wake_locked();
  }
  m->thread.join();
  {
    // The answers the route still holds, then those queued here: every
    // proposal is answered when stop() returns.
    std::lock_guard<std::mutex> lock(m->route_mu);
    if (m->answer_drain) m->answer_drain();
  }
  m->completions.reset();  // answers every proposal still queued
}

Progress Node::progress() const {
  std::lock_guard<std::mutex> lock(impl_->progress_mu);
  return impl_->progress;
}

}  // namespace etcdq::consensus
