// Linearizable reads (leader barriers, follower read indexes).
// On the consensus thread (raft/node_impl.h).
#include "raft/node_impl.h"

namespace etcdq::raft {

// Reads whose read index is applied now go to the completion threads.
void Node::Impl::release_reads(uint64_t applied) {
  if (reads_waiting_apply.empty() || reads_waiting_apply.begin()->first > applied) return;
  auto ready = std::make_shared<std::vector<ReadFn>>();
  auto end = reads_waiting_apply.upper_bound(applied);
  for (auto it = reads_waiting_apply.begin(); it != end; ++it) ready->push_back(std::move(it->second.fn));
  reads_waiting_apply.erase(reads_waiting_apply.begin(), end);
  completions->post([ready] {
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
  for (auto& fn : b->reads) fn(e);
  delete b;
  --self->inflight;
  self->maybe_close();
}

// Reads that arrived now: a leader confirms its leadership for all of
// them with one barrier; a follower asks the leader for a read index.
void Node::Impl::serve_reads(std::vector<ReadFn> rs, std::vector<std::function<void(Error, uint64_t)>> irs,
                             bool leader) {
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

// Follower: ask the leader for a read index for every read waiting now.
// With no leader known they wait (expire() times them out).
void Node::Impl::send_read_index() {
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
void Node::Impl::abandon_read_index_if_stale() {
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

bool Node::Impl::retryable(const Error& e) {
  return e == errors::leader_changed() || e == errors::not_leader() || e == errors::no_leader();
}

void Node::Impl::on_read_index(ReadIndexAnswer&& a) {
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
}  // namespace etcdq::raft
