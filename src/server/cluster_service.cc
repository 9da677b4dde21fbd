#include "server/cluster_service.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "member/cluster.h"
#include "server/peer_urls.h"
#include "server/forwarded_calls.h"

namespace etcdq::server {
namespace {

// A follower's membership call goes to the leader's Peer service with the
// caller it checked (server/forwarded_calls.h). `call(async, cctx, fwd,
// resp, done)` starts the Peer stub's method for the forwarded request Fwd.
template <typename Fwd, typename Req, typename Resp, typename Call>
bool forward_membership(Context* ctx, grpc::ServerUnaryReactor* reactor, const Req* req, Resp* resp,
                        const member::Caller& who, Call call) {
  return forward_to_leader(ctx, reactor, resp, /*with_revision=*/false,
                           [req, resp, who, call](peer::Peer::Stub* stub, grpc::ClientContext* cctx, auto done) {
                             auto fwd = std::make_shared<Fwd>();
                             *fwd->mutable_request() = *req;
                             set_forwarded_auth(who, fwd->mutable_auth());
                             call(stub->async(), cctx, fwd.get(), resp,
                                  [fwd, done = std::move(done)](grpc::Status s) { done(s); });
                           });
}

// The root role, checked on the member the client called (etcd's
// checkMembershipOperationPermission); `who` gets the caller.
Error check_membership_caller(Context* ctx, grpc::CallbackServerContext* c, member::Caller* who) {
  return check_caller(ctx, c, [ctx, who](const member::Caller& w) {
    *who = w;
    return member::check_admin(*ctx, w);
  });
}

// The answer to MemberRemove and MemberPromote once `e` is known.
template <typename Resp>
std::function<void(Error)> members_after(Context* ctx, Resp* resp, std::function<void(Error)> done) {
  return [ctx, resp, done = std::move(done)](Error e) {
    if (e) return done(e);
    member::list_members(*ctx, resp->mutable_members());
    ctx->fill_header(resp->mutable_header(), /*with_revision=*/false);
    done({});
  };
}

// MemberRemove and MemberPromote: checked here, done on the leader.
template <typename Fwd, typename Req, typename Resp, typename Call, typename Op>
grpc::ServerUnaryReactor* change_membership(Context* ctx, grpc::CallbackServerContext* c, const Req* req,
                                            Resp* resp, Call call, Op op) {
  auto* reactor = c->DefaultReactor();
  member::Caller who;
  if (Error e = check_membership_caller(ctx, c, &who)) {
    finish(reactor, e);
    return reactor;
  }
  if (forward_membership<Fwd>(ctx, reactor, req, resp, who, call)) return reactor;
  op(ctx, *req, resp, [reactor](Error e) { finish(reactor, e); });
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* ClusterService::MemberList(grpc::CallbackServerContext* c,
                                                     const etcdserverpb::MemberListRequest*,
                                                     etcdserverpb::MemberListResponse* resp) {
  auto* reactor = c->DefaultReactor();
  member::list_members(*ctx_, resp->mutable_members());
  ctx_->fill_header(resp->mutable_header(), /*with_revision=*/false);
  finish(reactor, {});
  return reactor;
}

void member_add(Context* ctx, const etcdserverpb::MemberAddRequest& req, etcdserverpb::MemberAddResponse* resp,
                std::function<void(Error)> done) {
  PeerUrls peer;
  if (Error e = parse_peer_urls({req.peerurls().begin(), req.peerurls().end()}, &peer)) return done(e);
  std::vector<std::string> urls = peer.urls;
  // A new id each time, also at a removed member's URL (identity.h).
  int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  uint64_t id = member::runtime_member_id(urls, now_ns);
  bool learner = req.islearner();
  ctx->membership->add_member(id, peer.address, learner, [ctx, resp, id, urls, learner, done = std::move(done)](Error e) {
    if (e) return done(e);
    auto* m = resp->mutable_member();
    m->set_id(id);
    for (const auto& u : urls) m->add_peerurls(u);
    m->set_islearner(learner);
    member::list_members(*ctx, resp->mutable_members());
    ctx->fill_header(resp->mutable_header(), /*with_revision=*/false);
    done({});
  });
}

void member_remove(Context* ctx, const etcdserverpb::MemberRemoveRequest& req,
                   etcdserverpb::MemberRemoveResponse* resp, std::function<void(Error)> done) {
  ctx->membership->remove_member(req.id(), members_after(ctx, resp, std::move(done)));
}

void member_promote(Context* ctx, const etcdserverpb::MemberPromoteRequest& req,
                    etcdserverpb::MemberPromoteResponse* resp, std::function<void(Error)> done) {
  ctx->membership->promote_member(req.id(), members_after(ctx, resp, std::move(done)));
}

grpc::ServerUnaryReactor* ClusterService::MemberAdd(grpc::CallbackServerContext* c,
                                                    const etcdserverpb::MemberAddRequest* req,
                                                    etcdserverpb::MemberAddResponse* resp) {
  auto* reactor = c->DefaultReactor();
  member::Caller who;
  if (Error e = check_membership_caller(ctx_, c, &who)) {
    finish(reactor, e);
    return reactor;
  }
  PeerUrls peer;
  if (Error e = parse_peer_urls({req->peerurls().begin(), req->peerurls().end()}, &peer)) {
    finish(reactor, e);
    return reactor;
  }
  if (forward_membership<peer::ForwardedMemberAdd>(
          ctx_, reactor, req, resp, who,
          [](auto* async, auto* cctx, auto* fwd, auto* rs, auto cb) { async->MemberAdd(cctx, fwd, rs, std::move(cb)); })) {
    return reactor;
  }
  member_add(ctx_, *req, resp, [reactor](Error e) { finish(reactor, e); });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::MemberRemove(grpc::CallbackServerContext* c,
                                                       const etcdserverpb::MemberRemoveRequest* req,
                                                       etcdserverpb::MemberRemoveResponse* resp) {
  return change_membership<peer::ForwardedMemberRemove>(
      ctx_, c, req, resp,
      [](auto* async, auto* cctx, auto* fwd, auto* rs, auto cb) { async->MemberRemove(cctx, fwd, rs, std::move(cb)); },
      member_remove);
}

grpc::ServerUnaryReactor* ClusterService::MemberPromote(grpc::CallbackServerContext* c,
                                                        const etcdserverpb::MemberPromoteRequest* req,
                                                        etcdserverpb::MemberPromoteResponse* resp) {
  return change_membership<peer::ForwardedMemberPromote>(
      ctx_, c, req, resp,
      [](auto* async, auto* cctx, auto* fwd, auto* rs, auto cb) { async->MemberPromote(cctx, fwd, rs, std::move(cb)); },
      member_promote);
}

grpc::ServerUnaryReactor* ClusterService::MemberUpdate(grpc::CallbackServerContext* c,
                                                       const etcdserverpb::MemberUpdateRequest* req,
                                                       etcdserverpb::MemberUpdateResponse* resp) {
  auto* reactor = c->DefaultReactor();
  // Nothing changes (libraft cannot move a member): answered here.
  member::Caller who;
  if (Error e = check_membership_caller(ctx_, c, &who)) {
    finish(reactor, e);
    return reactor;
  }
  PeerUrls peer;
  if (Error e = parse_peer_urls({req->peerurls().begin(), req->peerurls().end()}, &peer)) {
    finish(reactor, e);
    return reactor;
  }
  const std::string& address = peer.address;
  bool found = false;
  for (const auto& m : ctx_->membership->members()) {
    if (m.id != req->id()) continue;
    found = true;
    if (m.address != address) {
      finish(reactor, Error(Code::kUnimplemented,
                            "etcdq: changing a member's peer address is not supported (libraft 0.15 cannot); "
                            "remove the member and add it again"));
      return reactor;
    }
  }
  if (!found) {
    finish(reactor, errors::member_not_found());
    return reactor;
  }
  member::list_members(*ctx_, resp->mutable_members());
  ctx_->fill_header(resp->mutable_header(), /*with_revision=*/false);
  finish(reactor, {});
  return reactor;
}

}  // namespace etcdq::server
