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
// Mapping (gateway_request.h, before any call starts): protobuf's JSON
// support (google/protobuf/util/json_util.h), with
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
// `{"error":{"code","message"}}` (grpc-gateway v2, etcd 3.6). The body's
// end half-closes the call (etcd's Watch keeps going; its LeaseKeepAlive
// ends). A client that disconnects cancels the call; a slow reader holds
// the call back (reply.h) rather than growing memory.
//
// Errors as grpc-gateway v2 writes them (etcd 3.6): {"code":c,"message":m}
// with its HTTP status for the gRPC code (runtime.HTTPStatusFromCode:
// InvalidArgument 400, NotFound 404, FailedPrecondition 400 (v1: 412),
// Canceled 499 (v1: 408), ResourceExhausted 429, Unavailable 503, ...). A body that is not the
// request's JSON is InvalidArgument (a stream's first object: Unknown, 500).
// An unknown path under a prefix answers 404 {"code":5,"message":"Not
// Found"}, another method on a known path 501 {"code":12,"message":"Method
// Not Allowed"}. (etcd 3.4's v1 added "error", a copy of the message, and
// answered those two in plain text, 404 and 405.)
//
// The Authorization header is sent as gRPC metadata `token`, as etcd's
// gateway does (etcd reads "token" and "authorization").
//
// Yielding to gRPC clients: the calls run on gRPC's own threads, beside
// the gRPC clients' calls, and the HTTP side must not slow those (issue
// #14; etcd's Go scheduler shares its CPU between an HTTP flood and gRPC
// clients goroutine by goroutine, and its gateway is slow, so a flood
// gets little of it). Here a unary gateway call is cheap, and a flood
// answered as fast as it comes took half of the CPU the gRPC clients had
// (and their client machine's: the flood's client works for every
// answer). So: at most kMaxUnaryCalls unary calls run at once, and while
// gRPC clients start unary calls of their own (one within
// kGrpcQuietWindow: the server's count of calls started, less the
// gateway's) they start at most kRateBesideGrpc a second, evenly spaced:
// that rate (about what etcd's gateway answers beside gRPC puts) still
// cost the puts a noticeable share (bench/grpc_under_http_load.py), and a
// sequential gateway client beside a busy gRPC side still gets it (an
// earlier pacing by each call's run time, one call at a time, left a
// sequential gateway put client far slower). A concurrency cap alone did
// not do it: a gateway range runs in well under a millisecond, so even one
// at a time is thousands a second (bench/RESULTS.md, "Measurements moved from headers"). The others wait, in arrival order, costing
// no thread (their connections wait in connections.h). An idle gRPC side
// leaves the gateway its full rate. Streams
// (watch, keepalive, snapshot, observe) and the calls that wait for other
// clients (Lock, Campaign: an Unlock must never wait behind them) are not
// counted, on either side.
//
// Thread-safety: serve() from any thread (the HTTP workers); it never
// blocks: the answer comes through the reply, from gRPC's threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "http/reply.h"

namespace etcdq::http {

class Gateway {
 public:
  static constexpr size_t kMaxUnaryCalls = 64;
  static constexpr int kRateBesideGrpc = 500;  // unary calls started a second
  static constexpr std::chrono::milliseconds kGrpcQuietWindow{100};
  // `channel`: this member's own gRPC server; `grpc_unary_started`: the
  // unary calls that server started so far, the gateway's included (none:
  // the gateway never yields).
  explicit Gateway(std::shared_ptr<grpc::Channel> channel, std::function<uint64_t()> grpc_unary_started = nullptr);
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
