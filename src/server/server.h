// One member's client-facing gRPC server: the etcd v3 services on the
// client listen addresses. gRPC's receive limit is --max-request-bytes plus
// etcd's 512 KiB allowance for framing, so a slightly-too-large request gets
// etcd's "request is too large" and a far larger one gRPC's own refusal,
// exactly as with etcd (embed/serve.go, grpcOverheadBytes).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/context.h"

namespace etcdq::server {

// Streams one HTTP/2 connection to the peer server may have open at once
// (SETTINGS_MAX_CONCURRENT_STREAMS): a member's own gRPC client queues its
// calls past it. Each open stream is a gRPC call that holds memory, so
// streams opened and left waiting on one connection grew a member by
// gigabytes before there was a limit (bench/RESULTS.md, "Measurements
// moved from headers"). The client server advertises none, as etcd (whose
// --max-concurrent-streams defaults to math.MaxUint32): a client that
// honours a limit queues its calls past it, so a Put after 4,096 watches
// on one connection waited out its deadline. There net/h2_guard.h
// (kMaxConcurrentStreams, the same number) refuses a stream past it with
// RST_STREAM(REFUSED_STREAM), as Go's http2 server does past its limit;
// host/host.cc checks the two agree. Streams a client reset do not count:
// the guard paces those.
constexpr int kMaxConcurrentStreams = 4096;

class ClientServer {
 public:
  // `election_timeout`: --election-timeout; watch streams that asked for a
  // leader end after 3 of them without one (leader_monitor.h).
  ClientServer(Context* ctx, std::chrono::milliseconds watch_progress_interval,
               std::chrono::milliseconds election_timeout);
  ~ClientServer();

  // Listens on each "host:port" (none: only adopted connections) and
  // starts serving. Errors name the address.
  Error start(const std::vector<std::string>& listen);
  // Serves a connection accepted elsewhere (the client port's mux,
  // net/mux.h), taking ownership of `fd`. Any thread, between start() and
  // shutdown().
  void adopt(int fd);
  // A channel to this server within the process (the JSON gateway's,
  // http/gateway.h: its calls take the path every gRPC call takes). Any
  // thread, between start() and shutdown().
  std::shared_ptr<grpc::Channel> in_process_channel();
  // Unary calls started so far, the in-process channel's included (the
  // HTTP side yields to the others: http/gateway.h). Any thread.
  uint64_t unary_calls_started() const { return unary_started_->load(std::memory_order_relaxed); }
  // Ends every watch with a cancel and the reason, stops accepting calls;
  // in-flight calls get until `grace_ms` to finish.
  void shutdown(int grace_ms);

 private:
  struct Services;
  Context* ctx_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<std::atomic<uint64_t>> unary_started_ = std::make_shared<std::atomic<uint64_t>>(0);
};

}  // namespace etcdq::server
