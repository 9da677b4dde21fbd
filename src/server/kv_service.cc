#include "server/kv_service.h"

#include <utility>

#include "apply/kv.h"
#include "apply/validate.h"
#include "mvcc/compactor.h"
#include "member/pipeline.h"

namespace etcdq::server {
namespace {

using apply::Command;

// Proposes `cmd` (member/pipeline.h checks it); answers the call with the
// apply result of type Resp.
template <typename Resp>
void propose(Context* ctx, Command cmd, Resp* resp, grpc::ServerUnaryReactor* reactor) {
  member::propose(*ctx, std::move(cmd), [ctx, resp, reactor](apply::Result&& r) {
    if (r.error) return finish(reactor, r.error);
    auto* out = std::get_if<Resp>(&r.response);
    if (out == nullptr) return finish(reactor, errors::internal("apply returned the wrong response"));
    resp->Swap(out);
    ctx->fill_header(resp->mutable_header());
    finish(reactor, {});
  });
}

bool txn_is_serializable(const etcdserverpb::TxnRequest& r) {
  auto all = [](const auto& ops) {
    for (const auto& op : ops) {
      if (op.has_request_range() && !op.request_range().serializable()) return false;
      if (op.has_request_txn() && !txn_is_serializable(op.request_txn())) return false;
    }
    return true;
  };
  return all(r.success()) && all(r.failure());
}

// Runs `check` (the caller's permission) and then `read`, now
// (serializable) or after the read barrier (linearizable). After it, as
// etcd's Range checks after its read index: a follower has then applied
// every auth change the leader had, so a revoked permission (or auth just
// enabled) cannot still be honoured there.
template <typename Check, typename Read>
void serve_read(Context* ctx, bool serializable, grpc::ServerUnaryReactor* reactor, Check check, Read read) {
  auto run = [ctx, reactor, check, read](Error e) {
    if (e) return finish(reactor, e);
    if (Error denied = check()) return finish(reactor, denied);
    auto view = ctx->store->view();
    apply::ViewState s(*view, *ctx->keys);
    finish(reactor, read(s));
  };
  if (serializable) {
    run({});
  } else {
    ctx->node->read_barrier(run);
  }
}

}  // namespace

grpc::ServerUnaryReactor* KvService::Range(grpc::CallbackServerContext* c, const etcdserverpb::RangeRequest* req,
                                           etcdserverpb::RangeResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (Error e = apply::validate_range(*req)) {
    finish(reactor, e);
    return reactor;
  }
  if (refuse_call(*ctx_, c, reactor, /*learner_ok=*/req->serializable())) return reactor;
  // etcd checks a read before serving it (v3_server.go's Range).
  Context* ctx = ctx_;
  auto check = [ctx, req, cred = credentials_of(c)] {
    return check_caller(ctx, cred, [&](const auth::Caller& who) { return auth::check_range(*ctx->auth, who, *req); });
  };
  serve_read(ctx, req->serializable(), reactor, check, [ctx, req, resp](apply::ViewState& s) {
    Error e = apply::range(s, *req, resp);
    if (!e) ctx->fill_header(resp->mutable_header());
    return e;
  });
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Put(grpc::CallbackServerContext* c, const etcdserverpb::PutRequest* req,
                                         etcdserverpb::PutResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  Command cmd;
  *cmd.mutable_put() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose(ctx_, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* KvService::DeleteRange(grpc::CallbackServerContext* c,
                                                 const etcdserverpb::DeleteRangeRequest* req,
                                                 etcdserverpb::DeleteRangeResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  Command cmd;
  *cmd.mutable_delete_range() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose(ctx_, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Txn(grpc::CallbackServerContext* c, const etcdserverpb::TxnRequest* req,
                                         etcdserverpb::TxnResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  if (apply::txn_is_read_only(*req)) {
    // etcd serves a txn without writes as a read, not through the log (a
    // write is checked by the proposal pipeline).
    if (Error e = apply::validate_txn(*req, ctx_->limits.max_txn_ops)) {
      finish(reactor, e);
      return reactor;
    }
    Context* ctx = ctx_;
    auto check = [ctx, req, cred = credentials_of(c)] {
      return check_caller(ctx, cred,
                          [&](const auth::Caller& who) { return auth::check_txn(*ctx->auth, who, *req, nullptr); });
    };
    serve_read(ctx, txn_is_serializable(*req), reactor, check, [ctx, req, resp](apply::ViewState& s) {
      Error e = apply::txn(s, *req, apply::Env{[](int64_t) { return false; }}, resp);
      if (!e) ctx->fill_header(resp->mutable_header());
      return e;
    });
    return reactor;
  }
  Command cmd;
  *cmd.mutable_txn() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose(ctx_, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Compact(grpc::CallbackServerContext* c,
                                             const etcdserverpb::CompactionRequest* req,
                                             etcdserverpb::CompactionResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  Command cmd;
  *cmd.mutable_compaction() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  Context* ctx = ctx_;
  member::propose(*ctx, std::move(cmd), [ctx, resp, reactor](apply::Result&& r) {
    if (r.error) return finish(reactor, r.error);
    auto* out = std::get_if<etcdserverpb::CompactionResponse>(&r.response);
    if (out) resp->Swap(out);
    ctx->fill_header(resp->mutable_header());
    if (r.wait_compaction == 0) return finish(reactor, {});
    // physical=true: answer when the superseded versions are gone.
    ctx->store->compactor().when_finished(r.wait_compaction, [reactor](bool done) {
      finish(reactor, done ? Error() : errors::stopped());
    });
  });
  return reactor;
}

}  // namespace etcdq::server
