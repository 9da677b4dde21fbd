// Proposals batched into log entries, applied through the Fsm, answered.
// On the consensus thread (consensus/node_impl.h).
#include "consensus/node_impl.h"

#include <cstring>

#include "common/entry_frames.h"
#include "consensus/metrics.h"

namespace etcdq::consensus {

void Node::Impl::fail(uint64_t id, const Error& e) {
  forwarding.answered(id);
  auto it = waiters.find(id);
  if (it == waiters.end()) return;
  raft_metrics().proposals_failed.Increment();
  ProposalDone done = std::move(it->second);
  waiters.erase(it);
  done(e, nullptr);
}

int Node::Impl::on_fsm_apply(const struct raft_buffer* buf, void** result) {
  *result = nullptr;
  uint64_t index = raft_last_applied(&raft) + 1;
  {
    // How many commands (etcd's entries) this entry carries: what
    // --snapshot-count and --snapshot-catchup-entries count (snapshots.cc).
    std::string_view rest(static_cast<const char*>(buf->base), buf->len), command;
    bool corrupt = false;
    uint32_t commands = 0;
    while (next_framed(&rest, &command, &corrupt)) ++commands;
    note_applied_commands(index, commands);
  }
  std::vector<Applied> results;
  Error e = sm->apply(index, std::string_view(static_cast<const char*>(buf->base), buf->len), &results);
  if (e) {
    // The state database failed: continuing would serve a state that no
    // longer follows the log. Stop hard; a restart re-applies from the log.
    spdlog::critical("apply of log entry {} failed, stopping: {}", index, e.message());
    std::_Exit(70);
  }
  // Answer this entry's proposals where the answer route says
  // (Node::set_answer_route), else on the completion threads, or here when
  // there is nothing else to do.
  auto answers = std::make_shared<std::vector<std::pair<ProposalDone, std::unique_ptr<Outcome>>>>();
  for (auto& r : results) {
    if (r.origin != origin) continue;
    auto it = waiters.find(r.proposal_id);
    if (it == waiters.end()) continue;
    forwarding.answered(r.proposal_id);
    answers->emplace_back(std::move(it->second), std::move(r.outcome));
    waiters.erase(it);
  }
  std::function<void()> task;
  if (!answers->empty()) {
    task = [answers] {
      for (auto& [done, outcome] : *answers) done(Error(), std::move(outcome));
    };
  }
  bool routed = false;
  {
    // Every entry, answers or not: the route also learns where an entry ends.
    std::lock_guard<std::mutex> lock(route_mu);
    if (answer_route) routed = answer_route(task);
  }
  if (!routed && task) {
    // A lone answer on an otherwise idle member goes out from here: the
    // hand-off to a completion thread and its wake-up were a tenth of a
    // one-client put (bench/RESULTS.md, "Appends on an idle consensus
    // thread"). Idle: no other entry appended (so none committed or in
    // flight behind this one), and no proposal waiting. Answers are brief
    // and never block (they run here on failure too).
    bool idle = answers->size() == 1 && raft_last_index(&raft) <= index;
    if (idle) {
      std::lock_guard<std::mutex> lock(mu);
      idle = queue.empty();
    }
    if (idle) {
      task();
    } else {
      completions->post(std::move(task));
    }
  }
  read_index.release(index);
  return 0;
}

void Node::Impl::on_applied(struct raft_apply* req, int status, void* /*result*/) {
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
  delete a;
  --self->inflight;
  // The entry's commit goes to the followers at once in an empty append
  // (libraft_patches.h, 9), so they apply it, answer what was forwarded
  // through them and tell their watchers (a queue's consumers) now rather
  // than with the next entry or heartbeat. A follower still writing the
  // entry applies it once written (libraft_patches.h, 10).
  if (status == 0 && !self->closing && raft_state(&self->raft) == RAFT_LEADER &&
      self->raft.configuration.n > 1) {
    send_commit_now(&self->raft);
  }
  self->maybe_close();
}

void Node::Impl::fail_pending(Pending& p, const Error& e) {
  if (p.forwarded_done) {
    p.forwarded_done(e);
  } else if (p.done) {
    raft_metrics().proposals_failed.Increment();
    p.done(e, nullptr);
  }
}

// Leader: pack every pending proposal into as few entries as the size cap allows.
void Node::Impl::propose_entries(std::vector<Pending>& batch) {
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
        append_framed(&entry, p.bytes);
        a->ids.push_back(p.id);
        waiters.emplace(p.id, std::move(p.done));
      }
      ++i;
    } while (i < batch.size() && entry.size() + batch[i].bytes.size() + 4 <= kMaxEntryBytes);
    pad_entry(&entry);
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

int Node::Impl::fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
  return static_cast<Impl*>(fsm->data)->on_fsm_apply(buf, result);
}
}  // namespace etcdq::consensus
