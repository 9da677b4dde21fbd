// Membership changes and leadership transfer (etcd's checks).
// On the consensus thread (consensus/node_impl.h).
#include "consensus/metrics.h"
#include "consensus/node_impl.h"

namespace etcdq::consensus {

int Node::Impl::index_of(raft_id id) const {
  for (unsigned i = 0; i < raft.configuration.n; ++i) {
    if (raft.configuration.servers[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

unsigned Node::Impl::reachable_voters(raft_id except) const {
  auto now = SteadyClock::now();
  unsigned n = 0;
  for (unsigned i = 0; i < raft.configuration.n; ++i) {
    const auto& srv = raft.configuration.servers[i];
    if (srv.role != RAFT_VOTER || srv.id == except) continue;
    if (srv.id == raft.id || heard_recently(srv.id, now)) ++n;
  }
  return n;
}

unsigned Node::Impl::count_role(int role) const {
  unsigned n = 0;
  for (unsigned i = 0; i < raft.configuration.n; ++i) n += raft.configuration.servers[i].role == role;
  return n;
}

Error Node::Impl::change_error(int rv) {
  if (rv == RAFT_NOTLEADER) return errors::not_leader();
  if (rv == RAFT_CANTCHANGE) return errors::unhealthy();  // another change is still being applied
  if (rv == RAFT_LEADERSHIPLOST) return errors::leader_changed();
  return errors::internal(std::string("membership change: ") + raft_strerror(rv));
}

void Node::Impl::on_change(struct raft_change* req, int status) {
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

Node::Impl::ChangeReq* Node::Impl::new_change(std::function<void(Error)> done) {
  auto* c = new ChangeReq{};
  c->impl = this;
  c->done = std::move(done);
  c->req.data = c;
  return c;
}

void Node::Impl::start_assign(raft_id id, int role, std::function<void(Error)> done) {
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
void Node::Impl::add_member(raft_id id, const std::string& address, bool learner,
                            std::function<void(Error)> done) {
  if (closing) return done(errors::stopped());
  if (raft_state(&raft) != RAFT_LEADER) return done(errors::not_leader());
  for (unsigned i = 0; i < raft.configuration.n; ++i) {
    if (address == raft.configuration.servers[i].address) return done(errors::peer_url_exist());
  }
  if (index_of(id) >= 0) return done(errors::member_exist());
  // The log still holds entries that did not build the state (a restored
  // cluster's first; snapshots.cc start_log_floor): the new member would be
  // sent them instead of the state. The snapshot that drops them follows
  // the leader's first applied entry: retryable, as etcd's not-ready answer.
  if (log_holds_floor()) return done(errors::unhealthy());
  if (learner && count_role(RAFT_STANDBY) >= opts->max_learners) return done(errors::too_many_learners());
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
      self->promotions.want_voter(id);
      self->promotions.try_next(SteadyClock::now());
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

void Promotions::try_next(SteadyClock::time_point now) {
  struct raft& raft = n_.raft;
  if (raft_state(&raft) == RAFT_LEADER && adopted_term_ != raft.current_term) {
    // A leader that took over promotes the spares its predecessor added
    // (MemberList already shows them as voters): otherwise a member added
    // just before its leader died gets no entries and never serves.
    adopted_term_ = raft.current_term;
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      const auto& srv = raft.configuration.servers[i];
      if (srv.role == RAFT_SPARE && srv.id != raft.id) want_voter_.insert(srv.id);
    }
  }
  if (want_voter_.empty() || promoting_ || now < next_try_) return;
  if (raft_state(&raft) != RAFT_LEADER) {
    want_voter_.clear();  // the next leader takes on the spares (above)
    return;
  }
  // A spare gets no entries between tries: try again a heartbeat after one ends.
  next_try_ = now + std::chrono::milliseconds(n_.opts->heartbeat_ms);
  for (auto it = want_voter_.begin(); it != want_voter_.end();) {
    int i = n_.index_of(*it);
    if (i < 0 || raft.configuration.servers[i].role == RAFT_VOTER) {
      it = want_voter_.erase(it);
      continue;
    }
    if (raft.configuration.servers[i].role != RAFT_SPARE) {
      ++it;
      continue;
    }
    raft_id id = *it;
    if (n_.log_holds_floor()) return;  // add_member says why; tried again next heartbeat
    promoting_ = true;
    n_.start_assign(id, RAFT_VOTER, [this, id](Error e) {
      promoting_ = false;
      auto at = SteadyClock::now();
      if (e && at >= next_log_) {
        next_log_ = at + std::chrono::seconds(1);
        spdlog::info("member {:x} is not a voter yet (retrying): {}", id, e.message());
      }
    });
    return;
  }
}

void Node::Impl::promote_member(raft_id id, std::function<void(Error)> done) {
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
  start_assign(id, RAFT_VOTER, [done = std::move(done)](Error e) {
    if (!e) raft_metrics().learner_promotions.Increment();
    done(e);
  });
}

void Node::Impl::remove_member(raft_id id, std::function<void(Error)> done) {
  if (closing) return done(errors::stopped());
  if (raft_state(&raft) != RAFT_LEADER) return done(errors::not_leader());
  int i = index_of(id);
  if (i < 0) return done(errors::member_not_found());
  if (raft.configuration.servers[i].role == RAFT_VOTER && opts->strict_reconfig_check) {
    unsigned voters = count_role(RAFT_VOTER) - 1;
    // etcd's mayRemoveMember: too few of the others connected is ErrUnhealthy.
    if (voters == 0 || reachable_voters(id) < voters / 2 + 1) return done(errors::unhealthy());
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

void Node::Impl::on_transfer(struct raft_transfer* req) {
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

void Node::Impl::transfer_leadership(raft_id id, std::function<void(Error)> done) {
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
}  // namespace etcdq::consensus
