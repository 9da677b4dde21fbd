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

// Streams one HTTP/2 connection may have open at once, client and peer
// servers alike (SETTINGS_MAX_CONCURRENT_STREAMS; clients queue calls past
// it). etcd leaves it unbounded (math.MaxUint32); here each open stream is
// a gRPC call that holds memory, so streams opened and left waiting on one
// connection grew a member by gigabytes (bench/RESULTS.md, "Measurements moved from headers"). Streams a
// client reset do not count: net/h2_guard.h paces those.
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
