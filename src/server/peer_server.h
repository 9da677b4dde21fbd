// One member's peer-facing gRPC server, on --listen-peer-urls: every call
// that only members may make lives here and nowhere else (DESIGN.md) — the
// Peer service (forwarded proposals, read index, lease keep-alives for the
// leader, snapshot state, removal notices, queue consumer reports). The
// client server does not register it, so a client URL answers it as etcd
// answers an unknown method. The peer URL's listener (net/mux.h, in main)
// hands this server the connections that open with HTTP/2's preface and
// libraft's raw connections (consensus/transport.h) to the member: one listener,
// so that peer TLS covers all member traffic.
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
  explicit PeerServer(Context* ctx);
  ~PeerServer();

  // Starts serving (connections come through adopt()).
  Error start();
  // Serves a connection accepted elsewhere (the peer URL's mux), taking
  // ownership of `fd`. Any thread, between start() and shutdown().
  void adopt(int fd);
  // Stops accepting calls; in-flight calls get until `grace_ms`. Idempotent.
  void shutdown(int grace_ms);

 private:
  struct Services;
  Context* ctx_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace etcdq::server
