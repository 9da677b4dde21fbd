// Calls that only the leader can answer (membership changes, a lease's
// remaining TTL), made on a follower: passed to the leader's etcd service
// on its client URL, and the leader's answer is ours, with our header.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "raft/forwarder.h"
#include "server/context.h"

namespace etcdq::server {

// Returns false on the leader (the caller answers itself). Otherwise
// finishes `reactor`: with errors::no_leader() when no leader is known, or
// with the leader's answer in `resp`. `start(stub, client_context, done)`
// starts the call on a `Service::Stub` of the leader.
template <typename Service, typename Resp, typename Start>
bool proxy_to_leader(Context* ctx, grpc::ServerUnaryReactor* reactor, Resp* resp, bool with_revision, Start start) {
  if (ctx->node->progress().is_leader) return false;
  std::string target = ctx->node->leader_client_target();
  if (target.empty()) {
    finish(reactor, errors::no_leader());
    return true;
  }
  auto stub = std::shared_ptr<typename Service::Stub>(Service::NewStub(ctx->node->forwarder().channel(target)));
  auto cctx = std::make_shared<grpc::ClientContext>();
  cctx->set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(ctx->node->options().request_timeout_ms()));
  start(stub.get(), cctx.get(), [ctx, reactor, resp, stub, cctx, with_revision](grpc::Status s) {
    if (s.ok()) ctx->fill_header(resp->mutable_header(), with_revision);
    finish(reactor, raft::Forwarder::from_status(s));
  });
  return true;
}

}  // namespace etcdq::server
