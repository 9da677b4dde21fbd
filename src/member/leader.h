// Client calls only the leader can answer (a lease's remaining TTL and
// keep-alives, membership changes), made on a follower: the service passes
// them to the leader's Peer service (proto/etcdq/peer.proto) on its peer
// URL, never its client URL, so they reach it whatever the client URLs'
// scheme, and member-only. This is where the service gets the way there
// (consensus/forwarder.h's channels, with peer TLS when configured).
//
// Thread-safety: any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "common/error.h"
#include "member/context.h"

namespace etcdq::member::leader {

// The way to the leader's Peer service: a channel to its peer URL and the
// deadline a forwarded call gets (the member's request timeout, etcd's
// --request-timeout equivalent in consensus/node.h NodeOptions).
struct Route {
  std::shared_ptr<grpc::Channel> channel;
  std::chrono::milliseconds timeout{0};
};
// errors::no_leader() when no leader is known, or this member is the one
// (check Consensus::progress().is_leader first and answer locally).
Error route(Context& ctx, Route* out);

// A forwarded call's gRPC status as etcd's error (consensus/forwarder.h
// from_status): the leader's own etcd error as it is, a deadline as
// errors::timeout(), an unreachable or lost leader as
// errors::leader_changed().
Error from_status(const grpc::Status& s);

}  // namespace etcdq::member::leader
