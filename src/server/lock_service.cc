#include "server/lock_service.h"

#include "server/recipes.h"

namespace etcdq::server {
namespace {

// One Lock call; its state lives on the executor thread.
struct LockState final : RecipeCallState {
  std::string name;
  int64_t lease = 0;
  v3lockpb::LockResponse* resp = nullptr;
  std::string key;
  bool key_placed = false;

  void abandon() override {
    if (key_placed) c->del(key, [](Error, etcdserverpb::DeleteRangeResponse) {});
  }
};

void acquire(std::shared_ptr<LockState> st) {
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
                  st->wait = wait_deletes(st->c, prefix, my_rev - 1, [st](Error e2, etcdserverpb::ResponseHeader h) {
                    if (e2) return st->finish(e2);
                    *st->resp->mutable_header() = h;
                    st->resp->set_key(st->key);
                    st->finish({});
                  });
                });
}

void start(std::shared_ptr<LockState> st) {
  if (st->canceled) return;
  if (st->lease != 0) return acquire(st);
  st->c->lease_grant(kSessionTtlSeconds, [st](Error e, etcdserverpb::LeaseGrantResponse g) {
    if (e) return st->finish(e);
    st->lease = g.id();
    acquire(st);
  });
}

}  // namespace

grpc::ServerUnaryReactor* LockService::Lock(grpc::CallbackServerContext* c, const v3lockpb::LockRequest* req,
                                            v3lockpb::LockResponse* resp) {
  // The recipe reads and writes under "<name>/".
  if (Error e = check_read_write(client_->context(), c, req->name() + "/", prefix_end(req->name() + "/"))) {
    auto* reactor = c->DefaultReactor();
    reactor->Finish(to_grpc(e));
    return reactor;
  }
  auto st = std::make_shared<LockState>();
  st->c = client_;
  st->name = req->name();
  st->lease = req->lease();
  st->resp = resp;
  return new RecipeReactor(st, [st] { start(st); });
}

grpc::ServerUnaryReactor* LockService::Unlock(grpc::CallbackServerContext* c, const v3lockpb::UnlockRequest* req,
                                              v3lockpb::UnlockResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (Error e = check_read_write(client_->context(), c, req->key(), "")) {
    reactor->Finish(to_grpc(e));
    return reactor;
  }
  client_->del(req->key(), [reactor, resp](Error e, etcdserverpb::DeleteRangeResponse d) {
    if (!e) *resp->mutable_header() = d.header();
    reactor->Finish(service_status(e));
  });
  return reactor;
}

}  // namespace etcdq::server
