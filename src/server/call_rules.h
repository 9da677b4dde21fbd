// The rules every client call passes before its handler runs: etcd's gRPC
// interceptors (server/etcdserver/api/v3rpc/interceptor.go,
// newUnaryInterceptor and newStreamInterceptor), which etcd installs on the
// one server that carries KV, Watch, Lease, Cluster, Maintenance, Auth and
// also v3lock and v3election (embed/serve.go). In etcd's order:
//
//  1. a learner serves only what etcd's isRPCSupportedForLearner allows
//     (Status and serializable Range; of the streams only Snapshot): every
//     other call fails with errors::not_supported_for_learner();
//  2. a call whose metadata carries "hasleader: true" (clientv3's
//     WithRequireLeader) fails with errors::no_leader() while this member
//     knows no leader, streams included.
//
// The other server-wide rules sit in one place each too: parsing and
// request limits (request_parsing.h, the receive limit in server.cc),
// metrics (grpc_metrics.h, a gRPC interceptor). Auth is per method, as
// etcd's: each handler names the permission it needs.
//
// ruled_service.h applies these to every method of every client service;
// ClientServer::start refuses to serve a method it did not wrap.
//
// Thread-safety: any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "server/context.h"

namespace etcdq::server {

// What the rules need to know of this member at the call's start.
struct MemberRole {
  bool learner = false;
  bool has_leader = true;
};
MemberRole role_of(const Context& ctx);

// The rules above for a call with `metadata`; `learner_ok`: the call is one
// a learner serves. OK when the call may go on.
Error call_refusal(const MemberRole& role, const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                   bool learner_ok);
// call_refusal for `call` on this member now.
Error call_refusal(const Context& ctx, const grpc::ServerContextBase* call, bool learner_ok);

// etcd's isRPCSupportedForLearner, by request type.
template <class Req>
bool learner_serves(const Req&) {
  return false;
}
inline bool learner_serves(const etcdserverpb::RangeRequest& r) { return r.serializable(); }
inline bool learner_serves(const etcdserverpb::StatusRequest&) { return true; }

}  // namespace etcdq::server
