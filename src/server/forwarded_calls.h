// Client calls that only the leader can answer (a lease's remaining TTL,
// membership changes), made on a follower: passed to the leader's Peer
// service (proto/etcdq/peer.proto) on its peer URL, never its client URL,
// so they reach it whatever the client URLs' scheme, and member-only.
//
// The follower checks the caller's permission first (it has the token or
// the certificate, and the replicated auth store: etcd checks on the member
// the client called, v3_server.go's checkLeaseTimeToLive and
// checkMembershipOperationPermission) and passes the user it checked and
// the auth revision it checked at. The leader checks again with those
// (etcd's forwarded RequestHeader.Username/AuthRevision at apply): a
// revision older than its auth store's is refused with
// errors::auth_old_revision(), as etcd refuses a stale forwarded request.
//
// Thread-safety: any thread; callbacks run on gRPC's threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "etcdq/peer.grpc.pb.h"
#include "member/leader.h"
#include "server/context.h"

namespace etcdq::server {

// What the leader needs of a caller the follower checked.
inline void set_forwarded_auth(const member::Caller& who, peer::ForwardedAuth* out) {
  out->set_user(who.user);
  out->set_revision(who.revision);
}
inline member::Caller caller_of_forwarded(const peer::ForwardedAuth& a) { return {a.user(), a.revision()}; }

// On the leader, before the checks a local call gets: with auth enabled,
// errors::user_empty() without a user, errors::auth_old_revision() when
// the auth store moved past the revision the follower checked at.
Error check_forwarded_revision(const Context& ctx, const member::Caller& who);

// Returns false on the leader (the caller answers itself). Otherwise
// finishes `reactor`: errors::no_leader() when no leader is known, or the
// leader's answer in `resp` (with our header). `start(stub, client_context,
// done)` starts the call on the leader's peer::Peer::Stub.
template <typename Resp, typename Start>
bool forward_to_leader(Context* ctx, grpc::ServerUnaryReactor* reactor, Resp* resp, bool with_revision, Start start) {
  if (ctx->consensus->progress().is_leader) return false;
  member::leader::Route route;
  if (Error e = member::leader::route(*ctx, &route)) {
    finish(reactor, e);
    return true;
  }
  auto stub = std::shared_ptr<peer::Peer::Stub>(peer::Peer::NewStub(route.channel));
  auto cctx = std::make_shared<grpc::ClientContext>();
  cctx->set_deadline(std::chrono::system_clock::now() + route.timeout);
  start(stub.get(), cctx.get(), [ctx, reactor, resp, stub, cctx, with_revision](grpc::Status s) {
    if (s.ok()) ctx->fill_header(resp->mutable_header(), with_revision);
    finish(reactor, member::leader::from_status(s));
  });
  return true;
}

}  // namespace etcdq::server
