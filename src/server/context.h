// What the gRPC services add to the member's context (member/context.h):
// etcd's status conversion and its interceptor's refusals.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>

#include "member/context.h"
#include "member/pipeline.h"

namespace etcdq::server {

using member::Context;
using member::Limits;

grpc::Status to_grpc(const Error& e);

// etcd's unary interceptor (api/v3rpc/interceptor.go), run first by every
// call but Status: a learner answers only Status and serializable Range
// (`learner_ok`), everything else fails with
// errors::not_supported_for_learner(); a call whose metadata carries
// "hasleader: true" (clientv3.WithRequireLeader) fails with
// errors::no_leader() while this member knows no leader. True when the
// call was finished here.
bool refuse_call(const Context& ctx, grpc::CallbackServerContext* call, grpc::ServerUnaryReactor* reactor,
                 bool learner_ok = false);

// A stream refused before it started (a learner's Watch or LeaseKeepAlive).
template <typename Req, typename Resp>
class RefusedStream final : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  explicit RefusedStream(const grpc::Status& s) { this->Finish(s); }
  void OnDone() override { delete this; }
};

// Finishes a unary call with `e`, or OK.
inline void finish(grpc::ServerUnaryReactor* r, const Error& e) { r->Finish(to_grpc(e)); }

}  // namespace etcdq::server
