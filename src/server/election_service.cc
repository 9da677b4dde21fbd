#include "server/election_service.h"

#include <deque>

#include "server/lock_service.h"
#include "server/recipes.h"

namespace etcdq::server {
namespace {

Error not_leader() { return {Code::kUnknown, "election: not leader"}; }
Error no_leader() { return {Code::kUnknown, "election: no leader"}; }
Error missing_leader_key() { return {Code::kUnknown, "\"leader\" field must be provided"}; }

// Txn: if `key` still has create revision `rev`, run `op`.
etcdserverpb::TxnRequest if_leader(const v3electionpb::LeaderKey& l) {
  etcdserverpb::TxnRequest t;
  auto* cmp = t.add_compare();
  cmp->set_key(l.key());
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_create_revision(l.rev());
  return t;
}


void proclaim(LocalClient* c, const v3electionpb::LeaderKey& l, const std::string& value,
              std::function<void(Error, etcdserverpb::ResponseHeader)> done) {
  auto t = if_leader(l);
  auto* put = t.add_success()->mutable_request_put();
  put->set_key(l.key());
  put->set_value(value);
  put->set_ignore_lease(true);
  c->txn(std::move(t), [done](Error e, etcdserverpb::TxnResponse r) {
    if (e) return done(e, {});
    if (!r.succeeded()) return done(not_leader(), {});
    done({}, r.header());
  });
}

// One Campaign call; its state lives on the executor thread.
struct CampaignState final : RecipeCallState {
  v3electionpb::CampaignRequest req;
  v3electionpb::CampaignResponse* resp = nullptr;
  v3electionpb::LeaderKey leader;
  bool placed = false;

  // Resign: give up the candidacy we created (etcd does on cancel).
  void abandon() override {
    if (!placed) return;
    auto t = if_leader(leader);
    t.add_success()->mutable_request_delete_range()->set_key(leader.key());
    c->txn(std::move(t), [](Error, etcdserverpb::TxnResponse) {});
  }
};

void campaign(std::shared_ptr<CampaignState> st) {
  std::string prefix = st->req.name() + "/";
  std::string key = session_key(prefix, st->req.lease());
  put_if_absent(st->c, prefix, key, st->req.value(), st->req.lease(),
                [st, prefix, key](Error e, etcdserverpb::TxnResponse resp, int64_t rev) {
                  if (e) return st->finish(e);
                  st->placed = true;
                  st->leader.set_name(st->req.name());
                  st->leader.set_key(key);
                  st->leader.set_rev(rev);
                  st->leader.set_lease(st->req.lease());
                  *st->resp->mutable_header() = resp.header();
                  auto wait = [st, prefix, rev] {
                    if (st->canceled) return;
                    st->wait = wait_deletes(st->c, prefix, rev - 1, [st](Error e2, etcdserverpb::ResponseHeader) {
                      if (e2) return st->finish(e2);
                      *st->resp->mutable_leader() = st->leader;
                      st->finish({});
                    });
                  };
                  const auto& mine = resp.responses(0);
                  bool same_value = resp.succeeded() || (mine.response_range().kvs_size() > 0 &&
                                                         mine.response_range().kvs(0).value() == st->req.value());
                  if (same_value) return wait();
                  // Re-campaigning with a new value: proclaim it first.
                  proclaim(st->c, st->leader, st->req.value(), [st, wait](Error e2, etcdserverpb::ResponseHeader) {
                    if (e2) return st->finish(e2);
                    wait();
                  });
                });
}

void start_campaign(std::shared_ptr<CampaignState> st) {
  if (st->canceled) return;
  if (st->req.lease() != 0) return campaign(st);
  st->c->lease_grant(kSessionTtlSeconds, [st](Error e, etcdserverpb::LeaseGrantResponse g) {
    if (e) return st->finish(e);
    st->req.set_lease(g.id());
    campaign(st);
  });
}

// Streams the leader's key-value: the current one, then every change of
// its value, then the next leader when it goes (clientv3's Observe).
class ObserveCall final : public grpc::ServerWriteReactor<v3electionpb::LeaderResponse> {
 public:
  struct State {
    LocalClient* c;
    ObserveCall* call;
    std::string prefix;
    std::shared_ptr<LocalClient::Watch> watch;
    bool canceled = false;
    std::mutex mu;  // guards the queue: OnWriteDone runs on a gRPC thread
    std::deque<v3electionpb::LeaderResponse> out;
    bool writing = false;
    bool finished = false;

    // gRPC may run OnWriteDone inline in StartWrite, and OnDone in Finish:
    // neither is called with `mu` held.
    void send(v3electionpb::LeaderResponse r) {
      const v3electionpb::LeaderResponse* next = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (finished) return;
        out.push_back(std::move(r));
        if (!writing) {
          writing = true;
          next = &out.front();
        }
      }
      if (next) call->StartWrite(next);
    }
    void stop(grpc::Status s) {
      canceled = true;
      if (watch) watch->cancel();
      watch.reset();
      {
        std::lock_guard<std::mutex> lock(mu);
        if (finished) return;
        finished = true;
      }
      call->Finish(s);
    }
  };

  ObserveCall(LocalClient* c, const std::string& name) : st_(std::make_shared<State>()) {
    st_->c = c;
    st_->call = this;
    st_->prefix = name + "/";
    auto st = st_;
    c->post([st] { find_leader(st); });
  }

  void OnWriteDone(bool ok) override {
    const v3electionpb::LeaderResponse* next = nullptr;
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->writing = false;
      if (!st_->out.empty()) st_->out.pop_front();
      if (!ok) return;  // OnCancel follows
      if (!st_->out.empty() && !st_->finished) {
        st_->writing = true;
        next = &st_->out.front();
      }
    }
    if (next) StartWrite(next);
  }
  void OnCancel() override {
    auto st = st_;
    st->c->post([st] { st->stop(grpc::Status::CANCELLED); });
  }
  void OnDone() override { delete this; }

 private:
  static void find_leader(std::shared_ptr<State> st) {
    if (st->canceled) return;
    st->c->range(by_create(st->prefix, /*newest=*/false), [st](Error e, etcdserverpb::RangeResponse r) {
      if (st->canceled) return;
      if (e) return st->stop(service_status(e));
      if (r.kvs_size() == 0) {
        // No leader yet: wait for the first key under the prefix.
        st->watch = st->c->watch(st->prefix, prefix_end(st->prefix), r.header().revision() + 1,
                                 [st](std::vector<mvccpb::Event>&&) {
                                   if (st->canceled || !st->watch) return;
                                   st->watch->cancel();
                                   st->watch.reset();
                                   find_leader(st);
                                 });
        return;
      }
      v3electionpb::LeaderResponse lr;
      *lr.mutable_header() = r.header();
      *lr.mutable_kv() = r.kvs(0);
      st->send(lr);
      follow(st, r.kvs(0));
    });
  }

  static void follow(std::shared_ptr<State> st, const mvccpb::KeyValue& leader) {
    std::string key = leader.key();
    st->watch = st->c->watch(key, "", leader.mod_revision() + 1, [st](std::vector<mvccpb::Event>&& evs) {
      if (st->canceled || !st->watch) return;
      for (auto& ev : evs) {
        if (ev.type() == mvccpb::Event::DELETE) {
          st->watch->cancel();
          st->watch.reset();
          return find_leader(st);
        }
        v3electionpb::LeaderResponse lr;
        lr.mutable_header()->set_revision(ev.kv().mod_revision());
        st->c->context()->fill_header(lr.mutable_header());
        *lr.mutable_kv() = ev.kv();
        st->send(lr);
      }
    });
  }

  std::shared_ptr<State> st_;
};

}  // namespace

grpc::ServerUnaryReactor* ElectionService::Campaign(grpc::CallbackServerContext* c,
                                                    const v3electionpb::CampaignRequest* req,
                                                    v3electionpb::CampaignResponse* resp) {
  if (Error e = check_read_write(client_->context(), c, req->name() + "/", prefix_end(req->name() + "/"))) {
    auto* reactor = c->DefaultReactor();
    reactor->Finish(to_grpc(e));
    return reactor;
  }
  auto st = std::make_shared<CampaignState>();
  st->c = client_;
  st->req = *req;
  st->resp = resp;
  return new RecipeReactor(st, [st] { start_campaign(st); });
}

grpc::ServerUnaryReactor* ElectionService::Proclaim(grpc::CallbackServerContext* c,
                                                    const v3electionpb::ProclaimRequest* req,
                                                    v3electionpb::ProclaimResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (!req->has_leader()) {
    reactor->Finish(service_status(missing_leader_key()));
    return reactor;
  }
  if (Error e = check_read_write(client_->context(), c, req->leader().key(), "")) {
    reactor->Finish(to_grpc(e));
    return reactor;
  }
  proclaim(client_, req->leader(), req->value(), [reactor, resp](Error e, etcdserverpb::ResponseHeader h) {
    if (!e) *resp->mutable_header() = h;
    reactor->Finish(service_status(e));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ElectionService::Leader(grpc::CallbackServerContext* c,
                                                  const v3electionpb::LeaderRequest* req,
                                                  v3electionpb::LeaderResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (Error e = check_caller(client_->context(), c, [&](const member::Caller& who) {
        return member::check_read(*client_->context(), who, req->name() + "/", prefix_end(req->name() + "/"));
      })) {
    reactor->Finish(to_grpc(e));
    return reactor;
  }
  client_->range(by_create(req->name() + "/", /*newest=*/false), [reactor, resp](Error e, etcdserverpb::RangeResponse r) {
    if (e) return reactor->Finish(service_status(e));
    if (r.kvs_size() == 0) return reactor->Finish(service_status(no_leader()));
    *resp->mutable_header() = r.header();
    *resp->mutable_kv() = r.kvs(0);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

// An Observe refused before it started (auth).
class RefusedObserve final : public grpc::ServerWriteReactor<v3electionpb::LeaderResponse> {
 public:
  explicit RefusedObserve(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

grpc::ServerWriteReactor<v3electionpb::LeaderResponse>* ElectionService::Observe(
    grpc::CallbackServerContext* c, const v3electionpb::LeaderRequest* req) {
  if (Error e = check_caller(client_->context(), c, [&](const member::Caller& who) {
        return member::check_read(*client_->context(), who, req->name() + "/", prefix_end(req->name() + "/"));
      })) {
    return new RefusedObserve(to_grpc(e));
  }
  return new ObserveCall(client_, req->name());
}

grpc::ServerUnaryReactor* ElectionService::Resign(grpc::CallbackServerContext* c,
                                                  const v3electionpb::ResignRequest* req,
                                                  v3electionpb::ResignResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (!req->has_leader()) {
    reactor->Finish(service_status(missing_leader_key()));
    return reactor;
  }
  if (Error e = check_read_write(client_->context(), c, req->leader().key(), "")) {
    reactor->Finish(to_grpc(e));
    return reactor;
  }
  auto t = if_leader(req->leader());
  t.add_success()->mutable_request_delete_range()->set_key(req->leader().key());
  client_->txn(std::move(t), [reactor, resp](Error e, etcdserverpb::TxnResponse r) {
    if (!e) *resp->mutable_header() = r.header();
    reactor->Finish(service_status(e));
  });
  return reactor;
}

}  // namespace etcdq::server
