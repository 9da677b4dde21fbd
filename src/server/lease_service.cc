#include "server/lease_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <chrono>

#include "member/leases.h"
#include "member/pipeline.h"
#include "server/forwarded_calls.h"

namespace etcdq::server {
namespace {

using etcdserverpb::LeaseKeepAliveRequest;
using etcdserverpb::LeaseKeepAliveResponse;


// Answers each keep-alive request with the lease's TTL (0: unknown lease),
// one at a time, in order. With auth on, each request is checked first as
// etcd 3.5 checks a renewal (member/auth.h check_lease_renew, on the
// member the client called, before a follower forwards it); a refusal
// ends the stream with etcd's error, as v3rpc's leaseKeepAlive returns it.
// A request that does not parse ends the stream with etcd's INTERNAL
// (request_parsing.h parse_stream_message).
class KeepAliveStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  KeepAliveStream(Context* ctx, grpc::CallbackServerContext* call) : ctx_(ctx), call_(call) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    if (grpc::Status bad = parse_stream_message(&in_, &req_); !bad.ok()) {
      Finish(bad);
      return;
    }
    Context* cx = ctx_;
    int64_t id = req_.id();
    if (Error e = check_caller(ctx_, call_, [cx, id](const member::Caller& who) {
          return member::check_lease_renew(*cx, who, id);
        })) {
      Finish(to_grpc(e));
      return;
    }
    resp_.Clear();
    resp_.set_id(req_.id());
    if (!ctx_->consensus->progress().is_leader) {
      // Lease clocks live on the leader.
      member::leases::renew_at_leader(*ctx_, req_.id(), [this](Error e, int64_t ttl) {
        if (e) {
          Finish(to_grpc(e));
          return;
        }
        resp_.set_ttl(ttl);
        ctx_->fill_header(resp_.mutable_header());
        write_response();
      });
      return;
    }
    resp_.set_ttl(member::leases::renew(*ctx_, req_.id()));
    ctx_->fill_header(resp_.mutable_header());
    write_response();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    StartRead(&in_);
  }
  void OnDone() override { delete this; }

 private:
  void write_response() {
    bool own = false;
    out_.Clear();
    grpc::SerializationTraits<LeaseKeepAliveResponse>::Serialize(resp_, &out_, &own);
    StartWrite(&out_);
  }

  Context* ctx_;
  grpc::CallbackServerContext* call_;
  grpc::ByteBuffer in_, out_;
  LeaseKeepAliveRequest req_;
  LeaseKeepAliveResponse resp_;
};

}  // namespace

LeaseService::LeaseService(Context* ctx) : RuledService(ctx), ctx_(ctx) {
  unary("LeaseGrant", &LeaseService::LeaseGrant, {});
  unary("LeaseRevoke", &LeaseService::LeaseRevoke, {});
  unary("LeaseTimeToLive", &LeaseService::LeaseTimeToLive, {});
  unary("LeaseLeases", &LeaseService::LeaseLeases, {});
  raw_bidi("LeaseKeepAlive", &LeaseService::LeaseKeepAlive);
}

grpc::ServerUnaryReactor* LeaseService::LeaseGrant(grpc::CallbackServerContext* c,
                                                   const etcdserverpb::LeaseGrantRequest* req,
                                                   etcdserverpb::LeaseGrantResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (req->ttl() > member::leases::kMaxTtlSeconds) {
    finish(reactor, errors::lease_ttl_too_large());
    return reactor;
  }
  apply::Command cmd;
  *cmd.mutable_lease_grant() = *req;
  if (req->id() == 0) cmd.mutable_lease_grant()->set_id(member::leases::next_id(*ctx_));
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose_and_answer(ctx_, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* LeaseService::LeaseRevoke(grpc::CallbackServerContext* c,
                                                    const etcdserverpb::LeaseRevokeRequest* req,
                                                    etcdserverpb::LeaseRevokeResponse* resp) {
  auto* reactor = c->DefaultReactor();
  apply::Command cmd;
  *cmd.mutable_lease_revoke() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose_and_answer(ctx_, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* LeaseService::LeaseKeepAlive(
    grpc::CallbackServerContext* c) {
  return new KeepAliveStream(ctx_, c);
}

grpc::ServerUnaryReactor* LeaseService::LeaseTimeToLive(grpc::CallbackServerContext* c,
                                                        const etcdserverpb::LeaseTimeToLiveRequest* req,
                                                        etcdserverpb::LeaseTimeToLiveResponse* resp) {
  auto* reactor = c->DefaultReactor();
  // Checked here, on the member the client called (it has the token); a
  // follower passes the checked user on (server/forwarded_calls.h).
  Context* cx = ctx_;
  member::Caller who;
  if (Error e = check_caller(ctx_, c, [cx, req, &who](const member::Caller& w) -> Error {
        who = w;
        return member::check_lease_time_to_live(*cx, w, req->id(), req->keys());
      })) {
    finish(reactor, e);
    return reactor;
  }
  // The remaining TTL is the leader's clock: a follower asks it.
  if (forward_to_leader(ctx_, reactor, resp, /*with_revision=*/true,
                        [req, resp, who](peer::Peer::Stub* stub, grpc::ClientContext* cctx, auto done) {
                          auto fwd = std::make_shared<peer::ForwardedLeaseTimeToLive>();
                          *fwd->mutable_request() = *req;
                          set_forwarded_auth(who, fwd->mutable_auth());
                          stub->async()->LeaseTimeToLive(cctx, fwd.get(), resp,
                                                         [fwd, done = std::move(done)](grpc::Status s) { done(s); });
                        })) {
    return reactor;
  }
  member::leases::time_to_live(*ctx_, *req, resp);
  finish(reactor, {});
  return reactor;
}

grpc::ServerUnaryReactor* LeaseService::LeaseLeases(grpc::CallbackServerContext* c,
                                                    const etcdserverpb::LeaseLeasesRequest*,
                                                    etcdserverpb::LeaseLeasesResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* cx = ctx_;
  if (Error e = check_caller(ctx_, c, [cx](const member::Caller& who) { return member::require_user(*cx, who); })) {
    finish(reactor, e);
    return reactor;
  }
  for (int64_t id : member::leases::ids(*ctx_)) resp->add_leases()->set_id(id);
  ctx_->fill_header(resp->mutable_header());
  finish(reactor, {});
  return reactor;
}

}  // namespace etcdq::server
