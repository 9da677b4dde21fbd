// Linearizable reads (consensus/reads.h): leader barriers, follower read indexes.
// On the consensus thread (consensus/node_impl.h).
#include "consensus/metrics.h"
#include "consensus/node_impl.h"

namespace etcdq::consensus {

void Reads::release(uint64_t applied) {
  if (waiting_apply_.empty() || waiting_apply_.begin()->first > applied) return;
  auto ready = std::make_shared<std::vector<ReadFn>>();
  auto end = waiting_apply_.upper_bound(applied);
  for (auto it = waiting_apply_.begin(); it != end; ++it) ready->push_back(std::move(it->second.fn));
  waiting_apply_.erase(waiting_apply_.begin(), end);
  n_.completions->post([ready] {
    for (auto& fn : *ready) fn(Error());
  });
}

void Node::Impl::on_barrier(struct raft_barrier* req, int status) {
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
  if (e && !b->reads.empty()) raft_metrics().read_index_failed.Increment();
  for (auto& fn : b->reads) fn(e);
  delete b;
  --self->inflight;
  self->maybe_close();
}

void Reads::serve(std::vector<ReadFn> rs, std::vector<IndexFn> irs, bool leader) {
  struct raft& raft = n_.raft;
  for (auto& fn : irs) {
    if (!leader) {
      fn(errors::not_leader(), 0);
      continue;
    }
    // The read index is the commit index now, once the barrier below
    // confirms we still lead; before an entry of this term committed,
    // the barrier's own index.
    uint64_t commit = n_.committed_term == raft.current_term ? raft.commit_index : 0;
    rs.push_back([&raft, commit, fn = std::move(fn)](Error e) {
      fn(e, e ? 0 : (commit != 0 ? commit : raft_last_applied(&raft)));
    });
  }
  if (leader) {
    // Reads queued for a read index before this member became leader.
    for (auto& w : follower_reads_) rs.push_back(std::move(w.fn));
    follower_reads_.clear();
  }
  if (!rs.empty()) {
    if (!leader) {
      auto deadline = SteadyClock::now() + std::chrono::milliseconds(n_.opts->request_timeout_ms());
      for (auto& fn : rs) follower_reads_.push_back(WaitingRead{deadline, std::move(fn)});
    } else {
      // One barrier confirms leadership for every read waiting now.
      auto* b = new Node::Impl::BarrierReq{};
      b->impl = &n_;
      b->reads = std::move(rs);
      b->req.data = b;
      int rv = raft_barrier(&raft, &b->req, Node::Impl::on_barrier);
      if (rv != 0) {
        raft_metrics().read_index_failed.Increment();
        for (auto& fn : b->reads) fn(raft_error(rv, "read barrier"));
        delete b;
      } else {
        ++n_.inflight;
      }
    }
  }
  send_read_index();
}

// With no leader known they wait (expire() times them out).
void Reads::send_read_index() {
  if (read_index_inflight_ || follower_reads_.empty()) return;
  std::string target = n_.leader_target();
  if (target.empty()) return;
  raft_id lid = 0;
  const char* addr = nullptr;
  raft_leader(&n_.raft, &lid, &addr);
  read_index_inflight_ = true;
  read_index_leader_ = lid;
  uint64_t seq = ++read_index_seq_;
  read_index_batch_ = std::move(follower_reads_);
  follower_reads_.clear();
  std::weak_ptr<Node::Impl::Inbox> weak = n_.inbox;
  n_.forwarder->read_index(target, std::chrono::milliseconds(n_.opts->request_timeout_ms()),
                           [weak, seq](Error e, uint64_t index) {
                             if (auto in = weak.lock()) in->post_answer(Answer{seq, e, index});
                           });
}

void Reads::abandon_if_stale() {
  if (!read_index_inflight_) return;
  raft_id lid = 0;
  const char* addr = nullptr;
  raft_leader(&n_.raft, &lid, &addr);
  if (lid == read_index_leader_ && raft_state(&n_.raft) == RAFT_FOLLOWER) return;
  read_index_inflight_ = false;
  ++read_index_seq_;
  for (auto& w : read_index_batch_) follower_reads_.push_back(std::move(w));
  read_index_batch_.clear();
}

bool Reads::retryable(const Error& e) {
  return e == errors::leader_changed() || e == errors::not_leader() || e == errors::no_leader();
}

void Reads::on_answer(Answer&& a) {
  if (!read_index_inflight_ || a.seq != read_index_seq_) return;  // abandoned
  read_index_inflight_ = false;
  std::vector<WaitingRead> batch = std::move(read_index_batch_);
  read_index_batch_.clear();
  if (a.error && retryable(a.error)) {
    // Asked again of the next leader, as etcd retries a read index that
    // did not come back in time (and counts it slow).
    raft_metrics().slow_read_index.Increment();
    for (auto& w : batch) follower_reads_.push_back(std::move(w));
    return;
  }
  if (a.error) {
    raft_metrics().read_index_failed.Increment();
    auto fns = std::make_shared<std::vector<WaitingRead>>(std::move(batch));
    n_.completions->post([fns, e = a.error] {
      for (auto& w : *fns) w.fn(e);
    });
    return;
  }
  for (auto& w : batch) waiting_apply_.emplace(a.index, std::move(w));
  release(raft_last_applied(&n_.raft));
}

void Reads::expire(SteadyClock::time_point now) {
  bool timed_out = false;
  for (auto it = follower_reads_.begin(); it != follower_reads_.end();) {
    if (it->deadline <= now) {
      timed_out = true;
      ReadFn fn = std::move(it->fn);
      it = follower_reads_.erase(it);
      n_.completions->post([fn = std::move(fn)] { fn(errors::timeout()); });
    } else {
      ++it;
    }
  }
  for (auto it = waiting_apply_.begin(); it != waiting_apply_.end();) {
    if (it->second.deadline <= now) {
      timed_out = true;
      ReadFn fn = std::move(it->second.fn);
      it = waiting_apply_.erase(it);
      n_.completions->post([fn = std::move(fn)] { fn(errors::timeout()); });
    } else {
      ++it;
    }
  }
  // etcd counts a read index that timed out both slow and failed.
  if (timed_out) {
    raft_metrics().slow_read_index.Increment();
    raft_metrics().read_index_failed.Increment();
  }
}

void Reads::stop_all() {
  for (auto& w : follower_reads_) w.fn(errors::stopped());
  follower_reads_.clear();
  for (auto& w : read_index_batch_) w.fn(errors::stopped());
  read_index_batch_.clear();
  for (auto& [idx, w] : waiting_apply_) w.fn(errors::stopped());
  waiting_apply_.clear();
}
}  // namespace etcdq::consensus
