// Who leads and this member's progress, as libraft reports them.
// On the consensus thread (consensus/node_impl.h).
#include "consensus/metrics.h"
#include "consensus/node_impl.h"

namespace etcdq::consensus {

int Node::Impl::start_hook(struct raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv) {
  Impl* self = of(io);
  self->libraft_tick = tick;
  self->libraft_recv = recv;
  return self->uv_start(io, msecs, tick_hook, recv_hook);
}

void Node::Impl::tick_hook(struct raft_io* io) {
  Impl* self = of(io);
  self->libraft_tick(io);
  self->refresh_leader();
}

void Node::Impl::recv_hook(struct raft_io* io, struct raft_message* msg) {
  Impl* self = of(io);
  // Only members: the map must not grow with ids a peer makes up.
  if (self->index_of(msg->server_id) >= 0) self->contact.heard(msg->server_id, SteadyClock::now());
  // Read before libraft takes the message (libraft_patches.h, 10).
  HeardCommit::Vouch vouch = HeardCommit::vouch_of(*msg);
  if (!self->catch_up.contacted &&
      (msg->type == RAFT_IO_APPEND_ENTRIES || msg->type == RAFT_IO_INSTALL_SNAPSHOT)) {
    self->note_first_contact(*msg);
  }
  if (msg->type == RAFT_IO_INSTALL_SNAPSHOT) self->prefetch_state(*msg);
  self->libraft_recv(io, msg);
  self->heard_commit.heard(&self->raft, vouch);
  self->heard_commit.apply(&self->raft);
  self->refresh_leader();
}

// The first append (or snapshot) after this member started: how far
// behind the leader it is, and (on_tick, note_caught_up) how long it took
// to apply up to the leader's commit index of then.
void Node::Impl::note_first_contact(const struct raft_message& msg) {
  catch_up.contacted = true;
  catch_up.at = SteadyClock::now();
  catch_up.applied_at_contact = raft_last_applied(&raft);
  if (msg.type == RAFT_IO_INSTALL_SNAPSHOT) {
    catch_up.target = msg.install_snapshot.last_index;
    spdlog::info("first contact from leader {:x}: a snapshot at index {}; applied index {}", msg.server_id,
                 msg.install_snapshot.last_index, catch_up.applied_at_contact);
    return;
  }
  const struct raft_append_entries& a = msg.append_entries;
  catch_up.target = a.leader_commit > catch_up.applied_at_contact ? a.leader_commit : 0;
  spdlog::info("first contact from leader {:x}: its commit index {}, this member's last index {}, applied index {}",
               msg.server_id, a.leader_commit, raft_last_index(&raft), catch_up.applied_at_contact);
}

void Node::Impl::note_caught_up() {
  if (catch_up.target == 0 || raft_last_applied(&raft) < catch_up.target) return;
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - catch_up.at).count();
  spdlog::info("applied up to index {} (the leader's commit index at first contact) {} ms after it: {} entries",
               catch_up.target, ms, catch_up.target - std::min(catch_up.target, catch_up.applied_at_contact));
  catch_up.target = 0;
}

Node::Impl::LeaderView Node::Impl::leader_view() {
  LeaderView v;
  const char* addr = nullptr;
  raft_leader(&raft, &v.leader_id, &addr);
  // libraft 0.15 fails a leader's requests with RAFT_LEADERSHIPLOST a
  // moment before it leaves the leader state, and may keep naming itself.
  v.leading = raft_state(&raft) == RAFT_LEADER && stepped_down_term != raft.current_term;
  if (v.leader_id == raft.id && !v.leading) v.leader_id = 0;
  // As etcd's raft loop counts: a leader other than the last one seen.
  if (v.leader_id != last_leader_seen) {
    // etcd's raft logs "elected leader" and "lost leader" with the term: an
    // operator whose member has no quorum sees when and why it stopped
    // serving.
    if (v.leader_id != 0) {
      raft_metrics().leader_changes.Increment();
      spdlog::info("leader is {:x} at term {}", v.leader_id, raft.current_term);
    } else {
      spdlog::warn("lost the leader {:x} at term {}: no leader until an election is won", last_leader_seen,
                   raft.current_term);
    }
    last_leader_seen = v.leader_id;
  }
  note_role(v.leading);
  return v;
}

void Node::Impl::refresh_leader() {
  LeaderView v = leader_view();
  raft_id lid = v.leader_id;
  bool leading = v.leading;
  std::lock_guard<std::mutex> lock(progress_mu);
  if (progress.leader_id == lid && progress.term == raft.current_term && progress.is_leader == leading) return;
  progress.leader_id = lid;
  progress.term = raft.current_term;
  progress.is_leader = leading;
}

// Tells opts->on_role_change when this member starts or stops leading
// (consensus thread; the callback must not block).
void Node::Impl::note_role(bool leading) {
  if (leading == role_leading) return;
  role_leading = leading;
  if (opts->on_role_change) opts->on_role_change(leading);
}

void Node::Impl::update_progress() {
  Progress p;
  auto now = SteadyClock::now();
  p.term = raft.current_term;
  LeaderView v = leader_view();
  bool leading = v.leading;
  p.leader_id = v.leader_id;
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
      m.reachable = heard_recently(srv.id, now);
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
void Node::Impl::update_progress_after_failure(int status) {
  if (status == RAFT_LEADERSHIPLOST) stepped_down_term = raft.current_term;
  update_progress();
}

// The leader's peer host:port (from libraft's configuration), "" when no
// leader is known or we lead.
std::string Node::Impl::leader_target() {
  raft_id lid = 0;
  const char* addr = nullptr;
  raft_leader(&raft, &lid, &addr);
  if (lid == 0 || lid == raft.id || raft_state(&raft) != RAFT_FOLLOWER || addr == nullptr) return "";
  return addr;
}

// A member's peer host:port from libraft's configuration, "" if unknown.
std::string Node::Impl::peer_target(raft_id id) const {
  int i = index_of(id);
  if (i < 0 || raft.configuration.servers[i].address == nullptr) return "";
  return raft.configuration.servers[i].address;
}
}  // namespace etcdq::consensus
