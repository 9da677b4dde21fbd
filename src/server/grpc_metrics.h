// gRPC server metrics as etcd exposes them: go-grpc-prometheus' counters
// and etcd's byte counters (etcd's server/etcdserver/api/v3rpc/metrics.go
// and codec.go), kept by a gRPC server interceptor
// (grpc::experimental::ServerInterceptorFactoryInterface):
//
//   grpc_server_started_total{grpc_type,grpc_service,grpc_method}
//   grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}
//   grpc_server_msg_received_total{grpc_type,grpc_service,grpc_method}
//   grpc_server_msg_sent_total{grpc_type,grpc_service,grpc_method}
//   etcd_network_client_grpc_received_bytes_total   request messages, as serialized
//   etcd_network_client_grpc_sent_bytes_total       response messages, serialized
//   etcd_server_client_requests_total{type,client_api_version}  calls started, by
//       "unary" or "stream" and the client-api-version metadata; only
//       "3.0" to "3.9" get their own series, anything else (or none) is
//       "unknown", so clients cannot add series
//
// A unary call counts one message sent whether it succeeded or failed, as
// etcd 3.6 counts them (go-grpc-middleware's prometheus provider reports
// PostMsgSend after the handler either way; etcd 3.4's go-grpc-prometheus
// counted successes only).
//
// grpc_type is "unary", "client_stream", "server_stream" or "bidi_stream";
// grpc_code is the status code's Go name ("OK", "InvalidArgument", ...).
// Every method of the given services is pre-initialized at 0 (all 17
// codes for handled), as go-grpc-prometheus' InitializeMetrics does and
// etcd shows. A call of any other method (the unknown-method handler)
// is not counted, so clients cannot add series by inventing names.
//
// Also registers etcd_server_version{server_version} and
// etcd_cluster_version{cluster_version}, 1, with the etcd version etcdq
// answers as (maintenance_service.h).
//
// Also counts the unary calls started (`unary_started`, when given; Lock
// and Campaign left out, as they wait for other clients), for the HTTP
// side to yield to gRPC (http/gateway.h).
//
// Thread-safety: the factory is immutable after construction; counters are
// prometheus-cpp's (atomic).
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/metrics.h"

namespace etcdq::server {

// Registers etcd_server_version, etcd_cluster_version and the two
// etcd_network_client_grpc_*_bytes_total counters, which etcd shows from
// its start, before it serves clients (a member waiting for a leader
// shows them at 0): the host calls it before a leader is known, and
// GrpcMetrics' constructor calls it too. Idempotent; thread-safe.
void register_client_metrics();

class GrpcMetrics final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `services`: full names ("etcdserverpb.KV"), found in protobuf's
  // generated descriptor pool. `raw_methods` ("/etcdserverpb.Watch/Watch"):
  // methods registered raw, whose messages are ByteBuffers.
  explicit GrpcMetrics(const std::vector<std::string>& services, const std::vector<std::string>& raw_methods = {},
                       std::shared_ptr<std::atomic<uint64_t>> unary_started = nullptr);

  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

  struct Method {
    prometheus::Counter* started;
    prometheus::Counter* handled[17];  // by grpc::StatusCode
    prometheus::Counter* received;
    prometheus::Counter* sent;
    bool unary;  // counted in unary_started
    bool unary_type;  // grpc_type "unary" (Lock and Campaign included)
    bool raw;    // messages are grpc::ByteBuffer
  };

 private:
  std::unordered_map<std::string, Method> methods_;  // by "/service/method"
  std::shared_ptr<std::atomic<uint64_t>> unary_started_;
};

}  // namespace etcdq::server
