#include "server/lock_service.h"

#include "server/recipes.h"

namespace etcdq::server {
namespace {

// One Lock call. Its state lives on the executor thread; the reactor is
// finished exactly once.
class LockCall final : public grpc::ServerUnaryReactor {
 public:
  struct State {
    LocalClient* c;
    LockCall* call;  // null once finished
    std::string name;
    int64_t lease;
    v3lockpb::LockResponse* resp;
    std::string key;
    bool key_placed = false;
    bool canceled = false;
    std::shared_ptr<Recipe> wait;

    void finish(const Error& e) {
      if (!call) return;
      if (e && key_placed) c->del(key, [](Error, etcdserverpb::DeleteRangeResponse) {});
      LockCall* r = call;
      call = nullptr;
      r->Finish(service_status(e));
    }
  };

  LockCall(LocalClient* c, const v3lockpb::LockRequest* req, v3lockpb::LockResponse* resp)
      : st_(std::make_shared<State>()) {
    st_->c = c;
    st_->call = this;
    st_->name = req->name();
    st_->lease = req->lease();
    st_->resp = resp;
    auto st = st_;
    c->post([st] { start(st); });
  }

  void OnCancel() override {
    auto st = st_;
    st->c->post([st] {
      st->canceled = true;
      if (st->wait) st->wait->cancel();
      st->finish(Error(Code::kCancelled, "context canceled"));
    });
  }
  void OnDone() override { delete this; }

 private:
  static void start(std::shared_ptr<State> st) {
    if (st->canceled) return;
    if (st->lease != 0) return acquire(st);
    st->c->lease_grant(kSessionTtlSeconds, [st](Error e, etcdserverpb::LeaseGrantResponse g) {
      if (e) return st->finish(e);
      st->lease = g.id();
      acquire(st);
    });
  }

  static void acquire(std::shared_ptr<State> st) {
    if (st->canceled) return;
    std::string prefix = st->name + "/";
    st->key = session_key(prefix, st->lease);
    put_if_absent(st->c, prefix, st->key, "", st->lease,
                  [st, prefix](Error e, etcdserverpb::TxnResponse resp, int64_t my_rev) {
                    if (e) return st->finish(e);
                    st->key_placed = true;
                    if (st->canceled) return st->finish(Error(Code::kCancelled, "context canceled"));
                    const auto& owner = resp.responses(1).response_range();
                    if (owner.kvs_size() == 0 || owner.kvs(0).create_revision() == my_rev) {
                      *st->resp->mutable_header() = resp.header();
                      st->resp->set_key(st->key);
                      return st->finish({});
                    }
                    st->wait = wait_deletes(st->c, prefix, my_rev - 1,
                                            [st](Error e2, etcdserverpb::ResponseHeader h) {
                                              if (e2) return st->finish(e2);
                                              *st->resp->mutable_header() = h;
                                              st->resp->set_key(st->key);
                                              st->finish({});
                                            });
                  });
  }

  std::shared_ptr<State> st_;
};

}  // namespace

grpc::ServerUnaryReactor* LockService::Lock(grpc::CallbackServerContext*, const v3lockpb::LockRequest* req,
                                            v3lockpb::LockResponse* resp) {
  return new LockCall(client_, req, resp);
}

grpc::ServerUnaryReactor* LockService::Unlock(grpc::CallbackServerContext* c, const v3lockpb::UnlockRequest* req,
                                              v3lockpb::UnlockResponse* resp) {
  auto* reactor = c->DefaultReactor();
  client_->del(req->key(), [reactor, resp](Error e, etcdserverpb::DeleteRangeResponse d) {
    if (!e) *resp->mutable_header() = d.header();
    reactor->Finish(service_status(e));
  });
  return reactor;
}

}  // namespace etcdq::server
