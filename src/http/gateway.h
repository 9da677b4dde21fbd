// etcd's JSON gateway (grpc-gateway, as etcd 3.4/3.5 serve it on every
// client URL): POST /v3/<service>/<call> with the request message as JSON,
// answered with the response message as JSON. The routes are the
// google.api.http annotations of etcd's rpc.proto, v3lock.proto and
// v3election.proto (including the /v3/kv/lease/... aliases), under /v3/ and
// the /v3beta/ (etcd 3.3, 3.4) and /v3alpha/ (etcd 3.2, 3.3) prefixes.
//
// Every call goes to this member's own gRPC server through an in-process
// channel (grpc::Server::InProcessChannel; main.cc): the gateway only
// converts, so each request takes exactly the path a gRPC client's does —
// the same services, checks, limits, errors and proposal pipeline — and
// nothing is checked twice or differently. etcd does the same over a
// loopback gRPC connection (embed/serve.go, registerGateway).
//
// Mapping: protobuf's JSON support (google/protobuf/util/json_util.h), with
// grpc-gateway's JSONPb{OrigName: true} choices: proto field names, int64
// and uint64 as strings, bytes as base64, enums by name (names or numbers
// accepted), default values left out; unknown request fields are ignored
// and an empty body is the empty message (grpc-gateway's decoder).
//
// Unary calls answer `{...}` with Content-Length. Streaming calls (Watch,
// LeaseKeepAlive: the body holds one or more request objects, one after
// another; Snapshot, Election.Observe: one) answer chunked, one
// `{"result":{...}}` and a newline per response message, as grpc-gateway's
// ForwardResponseStream writes them; an error once streaming is a last
// `{"error":{"grpc_code","http_code","message","http_status"}}`. The body's
// end half-closes the call (etcd's Watch keeps going; its LeaseKeepAlive
// ends). A client that disconnects cancels the call; a slow reader holds
// the call back (reply.h) rather than growing memory.
//
// Errors as grpc-gateway v1 writes them: {"error":m,"message":m,"code":c}
// with its HTTP status for the gRPC code (runtime.HTTPStatusFromCode:
// InvalidArgument 400, NotFound 404, FailedPrecondition 412,
// ResourceExhausted 429, Unavailable 503, ...). A body that is not the
// request's JSON is InvalidArgument (a stream's first object: Unknown, 500).
// An unknown path under a prefix answers grpc-gateway's 404 "Not Found",
// another method on a known path 405.
//
// The Authorization header is sent as gRPC metadata `token`, as etcd's
// gateway does (etcd reads "token" and "authorization").
//
// Thread-safety: serve() from any thread (the HTTP workers); it never
// blocks: the answer comes through the reply, from gRPC's threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <memory>
#include <string>

#include "http/reply.h"

namespace etcdq::http {

class Gateway {
 public:
  // `channel`: this member's own gRPC server.
  explicit Gateway(std::shared_ptr<grpc::Channel> channel);
  ~Gateway();

  // Whether a request (its bytes, request line first) is the gateway's:
  // its path is under /v3/, /v3beta/ or /v3alpha/.
  static bool wants(const std::string& request);
  // The largest body the gateway takes: a request of --max-request-bytes
  // plus gRPC's allowance, as base64 inside JSON, with room to spare. A
  // larger one is refused before it is read (413).
  static size_t max_body_bytes(size_t max_request_bytes);

  // Connections::Handler's contract: answers at once in *out (bad requests)
  // or through *later. Returns the bytes of `in` consumed.
  size_t serve(const std::string& in, bool last, std::string* out, bool* keep_open, std::shared_ptr<Reply>* later);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// grpc-gateway's HTTP status for a gRPC status code (exposed for tests).
int http_status_of(grpc::StatusCode code);

}  // namespace etcdq::http
