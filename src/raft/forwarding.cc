// A follower's proposals, forwarded to the leader.
// On the consensus thread (raft/node_impl.h).
#include "raft/node_impl.h"

#include "common/entry_frames.h"

namespace etcdq::raft {

// Follower: hand our proposals to the leader; they are answered when this
// member applies them (or fail on error or timeout).
void Node::Impl::forward(std::vector<Pending>& batch) {
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
    append_framed(&framed, p.bytes);
    unanswered.emplace(p.id, std::move(framed));
    waiters.emplace(p.id, std::move(p.done));
    forwarded_deadlines.emplace_back(deadline, p.id);
    ids.push_back(p.id);
  }
  send_to_leader(ids);
}

// Sends `ids` (in `unanswered`) to the leader, or holds them while none is known.
void Node::Impl::send_to_leader(const std::vector<uint64_t>& ids) {
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
void Node::Impl::flush_held() {
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
}  // namespace etcdq::raft
