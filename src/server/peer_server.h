// One member's peer-facing gRPC server, on --listen-peer-urls: everything
// that only members may call lives here and nowhere else (DESIGN.md) —
// libraft's traffic (raft/transport.h) and the Peer service (forwarded
// proposals, read index, lease keep-alives for the leader, snapshot state,
// removal notices, queue consumer reports). The client server does not
// register these, so a client URL answers them as etcd answers an unknown
// method. One listener and one set of credentials, so that peer TLS covers
// all member traffic.
//
// The receive limit leaves room for a forwarded batch (up to 1 MiB of
// commands, or one command up to --max-request-bytes) and gRPC's framing.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "server/context.h"

namespace etcdq::server {

class PeerServer {
 public:
  // `raft_transport`: the node's RaftTransport service (raft::Node::
  // transport_service()); it must outlive this server.
  PeerServer(Context* ctx, grpc::Service* raft_transport);
  ~PeerServer();

  // Listens on each "host:port" and starts serving. Errors name the address.
  Error start(const std::vector<std::string>& listen);
  // Stops accepting calls; in-flight calls get until `grace_ms`. Idempotent.
  void shutdown(int grace_ms);

 private:
  struct Services;
  Context* ctx_;
  grpc::Service* raft_transport_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace etcdq::server
