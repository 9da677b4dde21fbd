// The consensus thread's wake-ups (drain) and ticks, deadlines, readiness, closing.
// On the consensus thread (consensus/node_impl.h).
#include "consensus/metrics.h"
#include "consensus/node_impl.h"

#include <cassert>
#include <cstdlib>

namespace etcdq::consensus {

// Forwarded proposals and reads that ran out of time.
void Node::Impl::expire(SteadyClock::time_point now) {
  forwarding.expire(now);
  read_index.expire(now);
}

void Node::Impl::set_ready() {
  {
    std::lock_guard<std::mutex> lock(ready_mu);
    ready = true;
  }
  ready_cv.notify_all();
}

bool Node::Impl::is_ready() {
  std::lock_guard<std::mutex> lock(ready_mu);
  return ready;
}

void Node::Impl::on_tick(uv_timer_t* t) {
  Impl* self = static_cast<Impl*>(t->data);
  if (raft_state(&self->raft) == RAFT_UNAVAILABLE && !self->closing) {
    // libraft's state after an I/O error it cannot go on from (a term or
    // vote it could not store, tick.c and recv.c convertToUnavailable): it
    // never leaves it. Stop with its reason, as a failed log write does
    // (consensus/log_appends.cc).
    spdlog::critical("the Raft log failed ({}), stopping", raft_errmsg(&self->raft));
    spdlog::default_logger()->flush();
    std::_Exit(70);
  }
  self->note_stall(SteadyClock::now());
  self->update_progress();
  self->note_caught_up();
  raft_metrics().proposals_pending.Set(static_cast<double>(self->waiters.size()));
  self->read_index.release(raft_last_applied(&self->raft));
  self->expire(SteadyClock::now());
  self->prefetch->expire(SteadyClock::now());
  if (self->closing) return;
  self->forwarding.flush_held();
  self->read_index.abandon_if_stale();
  if (raft_state(&self->raft) == RAFT_FOLLOWER) {
    self->read_index.send_read_index();
  } else if (raft_state(&self->raft) == RAFT_LEADER && self->read_index.followers_waiting()) {
    uv_async_send(&self->wake);  // drain() serves them with a barrier of ours
  }
  self->promotions.try_next(SteadyClock::now());
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

void Node::Impl::drain() {
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
  for (auto& [ids, e] : ffails) forwarding.on_failure(ids, e);
  for (auto& a : answers) read_index.on_answer(std::move(a));
  if (stopping || closing) {
    for (auto& p : batch) fail_pending(p, errors::stopped());
    forwarding.stop_all();
    for (auto& fn : rs) fn(errors::stopped());
    for (auto& fn : irs) fn(errors::stopped(), 0);
    read_index.stop_all();
    for (auto& t : ts) t();  // membership tasks see `closing` and fail
    maybe_close();
    return;
  }
  for (auto& t : ts) t();
  bool leader = raft_state(&raft) == RAFT_LEADER;
  if (leader) {
    propose_entries(batch);
  } else {
    forwarding.forward(batch);
  }
  // Held proposals go out on the tick (every 10 ms): a leader that cannot
  // be reached is not retried in a tight loop.
  read_index.serve(std::move(rs), std::move(irs), leader);
}

void Node::Impl::maybe_close() {
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

void Node::Impl::close_raft() {
  note_role(false);
  prefetch->drop();  // a transfer under way stops at its next chunk
  // Appends written but not yet reported reach libraft while it is whole.
  log_appends.stop_deferring();
  raft.data = this;
  ::raft_close(&raft, [](struct raft* r) {
    Impl* self = static_cast<Impl*>(r->data);
    forget_snapshots_sent(r);
    forget_answers(r);
    // The I/O is freed once the loop has ended (consensus/io.h, UvIo).
    {
      std::lock_guard<std::mutex> lock(self->inbox->mu);
      self->inbox->wake = nullptr;
    }
    uv_close(reinterpret_cast<uv_handle_t*>(&self->wake), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->tick), nullptr);
    self->log_appends.close_handles();
  });
}

bool Node::Impl::stop_requested_now() {
  std::lock_guard<std::mutex> lock(mu);
  return stop_requested;
}
}  // namespace etcdq::consensus
