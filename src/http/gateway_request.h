// What the JSON gateway (gateway.h) makes of one HTTP request before any
// call starts: bytes in, and out either the answer to send at once (a
// request that is not HTTP, no route, another method than POST, a body that
// is not the request's JSON) or the call to make: its route and its request
// messages, encoded. No gRPC runs here: gateway.cc starts the call, and
// fuzz/fuzz_gateway.cc feeds this anything.
//
// Request: as Connections hands it over (connections.h): complete, framed
// by Content-Length, perhaps followed by the next, pipelined request. The
// path is looked up under /v3/, /v3beta/ and /v3alpha/ (its query left
// out); Authorization becomes the call's token; Connection: close (and
// HTTP/1.0 without keep-alive) closes the connection after the answer.
// The body's top-level JSON values, in order, are the call's requests (a
// stream's body may hold several; a unary call takes the first, and none
// is the empty message), decoded as grpc-gateway's decoder does (gateway.h,
// "Mapping": unknown fields ignored).
//
// Answers: grpc-gateway v2's (etcd 3.6), gateway.h says which.
//
// Thread-safety: map_gateway_request() from any thread; the routes are
// read-only once built.
#pragma once

#include <google/protobuf/descriptor.h>
#include <grpcpp/support/status_code_enum.h>

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace etcdq::http {

struct GatewayRoute {
  std::string grpc_path;  // "/etcdserverpb.KV/Range"
  const google::protobuf::Descriptor* request;
  const google::protobuf::Descriptor* response;
  bool client_streaming;
  bool streaming;  // either side streams: a chunked answer
  bool waits;      // Lock, Campaign: waits for other clients (not counted by the gateway's admission)
};

// etcd's routes (google.api.http annotations of rpc.proto, v3lock.proto,
// v3election.proto), by path under a prefix ("kv/range"), for the methods
// our protos define.
using GatewayRoutes = std::map<std::string, GatewayRoute, std::less<>>;
GatewayRoutes gateway_routes();
// The prefixes the routes' paths are under (etcd 3.4+, 3.3, 3.2).
inline constexpr std::string_view kGatewayPrefixes[] = {"/v3/", "/v3beta/", "/v3alpha/"};

struct GatewayRequest {
  size_t consumed = 0;     // bytes of the input this request took (all of it when not HTTP)
  bool keep_open = false;  // the connection serves another request after this one
  std::string answer;      // not empty: the whole HTTP response, sent at once (no call)
  // Else the call: its route, its request messages (serialized; exactly
  // one for a unary call) and the Authorization header (a view into the
  // input; empty when none).
  const GatewayRoute* route = nullptr;
  std::vector<std::string> messages;
  std::string_view token;
};

// `in`: the request's bytes, request line first; `last`: the connection's
// last request (the answer then closes it).
GatewayRequest map_gateway_request(const GatewayRoutes& routes, const std::string& in, bool last);

// grpc-gateway's answers (with etcd's CORS headers): a head without its
// framing and blank line, a whole answer framed by Content-Length, and an
// error's body {"code":c,"message":m} and whole answer (its HTTP status
// by http_status_of, gateway.h).
std::string gateway_head(int status, const char* content_type, bool grpc_metadata, bool keep_open);
std::string gateway_whole(int status, const char* content_type, bool grpc_metadata, bool keep_open,
                          const std::string& body);
std::string gateway_error_body(grpc::StatusCode code, const std::string& message);
std::string gateway_error_answer(grpc::StatusCode code, const std::string& message, bool keep_open);

}  // namespace etcdq::http
