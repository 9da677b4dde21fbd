#include "server/cluster_service.h"

#include <algorithm>
#include <vector>

#include "raft/forwarder.h"
#include "server/peer_urls.h"
#include "server/proxy.h"

namespace etcdq::server {
namespace {

std::string peer_url_of(const raft::MemberState& m) { return "http://" + m.address; }

// A follower's membership call goes to the leader (server/proxy.h).
template <typename Resp, typename Start>
bool proxy_to_leader(Context* ctx, grpc::ServerUnaryReactor* reactor, Resp* resp, Start start) {
  return server::proxy_to_leader<etcdserverpb::Cluster>(ctx, reactor, resp, /*with_revision=*/false, start);
}

}  // namespace

// Sorted by member id, as etcd's RaftCluster.Members() (membership/cluster.go:
// MembersByID): `etcdctl member list` prints them in that order and scripts
// take the first line or diff the output.
void list_members(const Context& ctx, google::protobuf::RepeatedPtrField<etcdserverpb::Member>* out) {
  std::vector<raft::MemberState> members = ctx.node->members();
  std::sort(members.begin(), members.end(),
            [](const raft::MemberState& a, const raft::MemberState& b) { return a.id < b.id; });
  for (const auto& m : members) {
    auto* o = out->Add();
    o->set_id(m.id);
    o->add_peerurls(peer_url_of(m));
    o->set_islearner(m.learner);
    if (auto a = ctx.members->get(m.id)) {
      o->set_name(a->name());
      for (const auto& u : a->client_urls()) o->add_clienturls(u);
    }
  }
}

grpc::ServerUnaryReactor* ClusterService::MemberList(grpc::CallbackServerContext* c,
                                                     const etcdserverpb::MemberListRequest*,
                                                     etcdserverpb::MemberListResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  list_members(*ctx_, resp->mutable_members());
  ctx_->fill_header(resp->mutable_header(), /*with_revision=*/false);
  finish(reactor, {});
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::MemberAdd(grpc::CallbackServerContext* c,
                                                    const etcdserverpb::MemberAddRequest* req,
                                                    etcdserverpb::MemberAddResponse* resp) {
  auto* reactor = c->DefaultReactor();
  // Membership changes need the root role (etcd's authApplierV3 for
  // cluster changes; checked on the member the client called).
  if (Error e = check_caller(ctx_, c, [this](const auth::Caller& who) { return member::check_admin(*ctx_, who); })) {
    finish(reactor, e);
    return reactor;
  }
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  PeerUrls peer;
  if (Error e = parse_peer_urls({req->peerurls().begin(), req->peerurls().end()}, &peer)) {
    finish(reactor, e);
    return reactor;
  }
  Context* ctx = ctx_;
  if (proxy_to_leader(ctx, reactor, resp, [req, resp](auto* stub, auto* cctx, auto cb) {
        stub->async()->MemberAdd(cctx, req, resp, std::move(cb));
      })) {
    return reactor;
  }
  std::vector<std::string> urls = peer.urls;
  uint64_t id = member::member_id(urls, ctx->cluster_token);
  bool learner = req->islearner();
  ctx->node->add_member(id, peer.address, learner, [ctx, reactor, resp, id, urls, learner](Error e) {
    if (e) return finish(reactor, e);
    auto* m = resp->mutable_member();
    m->set_id(id);
    for (const auto& u : urls) m->add_peerurls(u);
    m->set_islearner(learner);
    list_members(*ctx, resp->mutable_members());
    ctx->fill_header(resp->mutable_header(), /*with_revision=*/false);
    finish(reactor, {});
  });
  return reactor;
}

// MemberRemove and MemberPromote: on the leader, `op` changes the
// configuration; the answer lists the members after it.
template <typename Req, typename Resp, typename Proxy, typename Op>
grpc::ServerUnaryReactor* change_membership(Context* ctx, grpc::CallbackServerContext* c, const Req* req,
                                            Resp* resp, Proxy proxy, Op op) {
  auto* reactor = c->DefaultReactor();
  if (Error e = check_caller(ctx, c, [ctx](const auth::Caller& who) { return member::check_admin(*ctx, who); })) {
    finish(reactor, e);
    return reactor;
  }
  if (refuse_call(*ctx, c, reactor)) return reactor;
  if (proxy_to_leader(ctx, reactor, resp, [req, resp, proxy](auto* stub, auto* cctx, auto cb) {
        proxy(stub, cctx, req, resp, std::move(cb));
      })) {
    return reactor;
  }
  op(req->id(), [ctx, reactor, resp](Error e) {
    if (e) return finish(reactor, e);
    list_members(*ctx, resp->mutable_members());
    ctx->fill_header(resp->mutable_header(), /*with_revision=*/false);
    finish(reactor, {});
  });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::MemberRemove(grpc::CallbackServerContext* c,
                                                       const etcdserverpb::MemberRemoveRequest* req,
                                                       etcdserverpb::MemberRemoveResponse* resp) {
  return change_membership(
      ctx_, c, req, resp,
      [](auto* stub, auto* cctx, auto* rq, auto* rs, auto cb) { stub->async()->MemberRemove(cctx, rq, rs, std::move(cb)); },
      [this](uint64_t id, auto done) { ctx_->node->remove_member(id, std::move(done)); });
}

grpc::ServerUnaryReactor* ClusterService::MemberPromote(grpc::CallbackServerContext* c,
                                                        const etcdserverpb::MemberPromoteRequest* req,
                                                        etcdserverpb::MemberPromoteResponse* resp) {
  return change_membership(
      ctx_, c, req, resp,
      [](auto* stub, auto* cctx, auto* rq, auto* rs, auto cb) { stub->async()->MemberPromote(cctx, rq, rs, std::move(cb)); },
      [this](uint64_t id, auto done) { ctx_->node->promote_member(id, std::move(done)); });
}

grpc::ServerUnaryReactor* ClusterService::MemberUpdate(grpc::CallbackServerContext* c,
                                                       const etcdserverpb::MemberUpdateRequest* req,
                                                       etcdserverpb::MemberUpdateResponse* resp) {
  auto* reactor = c->DefaultReactor();
  // Membership changes need the root role (etcd's authApplierV3 for
  // cluster changes; checked on the member the client called).
  if (Error e = check_caller(ctx_, c, [this](const auth::Caller& who) { return member::check_admin(*ctx_, who); })) {
    finish(reactor, e);
    return reactor;
  }
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  PeerUrls peer;
  if (Error e = parse_peer_urls({req->peerurls().begin(), req->peerurls().end()}, &peer)) {
    finish(reactor, e);
    return reactor;
  }
  const std::string& address = peer.address;
  bool found = false;
  for (const auto& m : ctx_->node->members()) {
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
  list_members(*ctx_, resp->mutable_members());
  ctx_->fill_header(resp->mutable_header(), /*with_revision=*/false);
  finish(reactor, {});
  return reactor;
}

}  // namespace etcdq::server
