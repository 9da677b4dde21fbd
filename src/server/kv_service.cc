#include "server/kv_service.h"

#include <utility>

#include "member/kv.h"
#include "member/reads.h"

namespace etcdq::server {

using apply::Command;

grpc::ServerUnaryReactor* KvService::Range(grpc::CallbackServerContext* c, const etcdserverpb::RangeRequest* req,
                                           etcdserverpb::RangeResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (Error e = member::kv::validate(*req)) {
    finish(reactor, e);
    return reactor;
  }
  // etcd checks a read before serving it (v3_server.go's Range).
  Context* ctx = ctx_;
  auto check = [ctx, req, cred = credentials_of(c)] {
    return check_caller(ctx, cred, [&](const member::Caller& who) { return member::check_range(*ctx, who, *req); });
  };
  member::range(*ctx, member::read_mode(*req), req, resp, check, [reactor](Error e) { finish(reactor, e); });
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Put(grpc::CallbackServerContext* c, const etcdserverpb::PutRequest* req,
                                         etcdserverpb::PutResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Command cmd;
  *cmd.mutable_put() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose_and_answer(ctx_, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* KvService::DeleteRange(grpc::CallbackServerContext* c,
                                                 const etcdserverpb::DeleteRangeRequest* req,
                                                 etcdserverpb::DeleteRangeResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Command cmd;
  *cmd.mutable_delete_range() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose_and_answer(ctx_, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Txn(grpc::CallbackServerContext* c, const etcdserverpb::TxnRequest* req,
                                         etcdserverpb::TxnResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (member::kv::is_read_only(*req)) {
    // etcd serves a txn without writes as a read, not through the log (a
    // write is checked by the proposal pipeline).
    if (Error e = member::kv::validate(*ctx_, *req)) {
      finish(reactor, e);
      return reactor;
    }
    Context* ctx = ctx_;
    auto check = [ctx, req, cred = credentials_of(c)] {
      return check_caller(ctx, cred,
                          [&](const member::Caller& who) { return member::check_read_txn(*ctx, who, *req); });
    };
    member::read_txn(*ctx, member::read_mode(*req), req, resp, check, [reactor](Error e) { finish(reactor, e); });
    return reactor;
  }
  Command cmd;
  *cmd.mutable_txn() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose_and_answer(ctx_, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Compact(grpc::CallbackServerContext* c,
                                             const etcdserverpb::CompactionRequest* req,
                                             etcdserverpb::CompactionResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Command cmd;
  *cmd.mutable_compaction() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  Context* ctx = ctx_;
  member::propose_for<etcdserverpb::CompactionResponse>(
      *ctx, std::move(cmd), [ctx, resp, reactor](member::Answer<etcdserverpb::CompactionResponse>&& a) {
        if (a.error) return finish(reactor, a.error);
        resp->Swap(&a.response);
        if (a.wait_compaction == 0) return finish(reactor, {});
        // physical=true: answer when the superseded versions are gone.
        member::kv::when_compacted(*ctx, a.wait_compaction, [reactor](Error e) { finish(reactor, e); });
      });
  return reactor;
}

}  // namespace etcdq::server
