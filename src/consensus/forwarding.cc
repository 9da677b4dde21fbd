// A follower's proposals, forwarded to the leader (consensus/forwarded_proposals.h).
// On the consensus thread (consensus/node_impl.h).
#include "consensus/node_impl.h"

#include "common/entry_frames.h"

namespace etcdq::consensus {

void ForwardedProposals::forward(std::vector<Pending>& batch) {
  if (batch.empty()) return;
  auto deadline = SteadyClock::now() + std::chrono::milliseconds(n_.opts->request_timeout_ms());
  std::vector<uint64_t> ids;
  for (auto& p : batch) {
    if (p.forwarded_done) {
      // Sent to us as the leader, but we no longer are.
      p.forwarded_done(errors::leader_changed());
      continue;
    }
    std::string framed;
    append_framed(&framed, p.bytes);
    unanswered_.emplace(p.id, std::move(framed));
    n_.waiters.emplace(p.id, std::move(p.done));
    deadlines_.emplace_back(deadline, p.id);
    ids.push_back(p.id);
  }
  send_to_leader(ids);
}

// Sends `ids` (in `unanswered_`) to the leader, or holds them while none is known.
void ForwardedProposals::send_to_leader(const std::vector<uint64_t>& ids) {
  std::string target = n_.leader_target();
  if (target.empty()) {
    held_.insert(held_.end(), ids.begin(), ids.end());
    return;
  }
  auto timeout = std::chrono::milliseconds(n_.opts->request_timeout_ms());
  std::vector<std::string> cmds;
  std::vector<uint64_t> call_ids;
  size_t bytes = 0;
  auto send = [&] {
    if (call_ids.empty()) return;
    std::weak_ptr<Node::Impl::Inbox> weak = n_.inbox;
    n_.forwarder->propose(target, std::move(cmds), timeout, [weak, call_ids](Error e) {
      if (!e) return;  // answered when applied here
      if (auto in = weak.lock()) in->post_failure(call_ids, e);
    });
    cmds.clear();
    call_ids.clear();
    bytes = 0;
  };
  for (uint64_t id : ids) {
    auto it = unanswered_.find(id);
    if (it == unanswered_.end()) continue;
    // Under the leader's gRPC message limit: a call carries either at
    // most kMaxForwardBytes or one (large) command.
    if (bytes + it->second.size() > kMaxForwardBytes) send();
    bytes += it->second.size();
    cmds.push_back(it->second);
    call_ids.push_back(id);
  }
  send();
}

void ForwardedProposals::flush_held() {
  if (held_.empty()) return;
  if (raft_state(&n_.raft) == RAFT_LEADER) {
    std::vector<Pending> batch;
    for (uint64_t id : held_) {
      auto w = n_.waiters.find(id);
      auto b = unanswered_.find(id);
      if (w == n_.waiters.end() || b == unanswered_.end()) continue;
      Pending p;
      p.id = id;
      p.bytes = std::move(b->second);
      p.framed = true;
      p.done = std::move(w->second);
      unanswered_.erase(b);
      n_.waiters.erase(w);
      batch.push_back(std::move(p));
    }
    held_.clear();
    n_.propose_entries(batch);
    return;
  }
  if (n_.leader_target().empty()) return;
  std::vector<uint64_t> ids;
  ids.swap(held_);
  send_to_leader(ids);
}

void ForwardedProposals::on_failure(const std::vector<uint64_t>& ids, const Error& e) {
  for (uint64_t id : ids) {
    if (e == errors::not_leader() && n_.waiters.count(id)) {
      held_.push_back(id);  // refused unproposed: send to the new leader
    } else {
      n_.fail(id, e);
    }
  }
}

void ForwardedProposals::expire(SteadyClock::time_point now) {
  while (!deadlines_.empty() && deadlines_.front().first <= now) {
    n_.fail(deadlines_.front().second, errors::timeout());
    deadlines_.pop_front();
  }
}

void ForwardedProposals::stop_all() {
  // Ours that went to a leader (or wait for one) will not be applied here.
  std::vector<uint64_t> sent;
  for (const auto& [id, bytes] : unanswered_) sent.push_back(id);
  for (uint64_t id : sent) n_.fail(id, errors::stopped());
  held_.clear();
}
}  // namespace etcdq::consensus
