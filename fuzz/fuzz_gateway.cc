// Fuzzes the JSON gateway's request mapping (http/gateway_request.h): an
// HTTP request as the connections hand it over, turned into either an
// answer at once or a gRPC call's request messages. The input is the
// request's bytes.
//
// Invariants:
//   - it takes no more than it was given, and all of it when it is not HTTP
//     (400, and the connection closes);
//   - an answer at once is one well-formed HTTP/1.1 response: a status
//     line, Content-Length that frames exactly its body, "Connection:
//     close" exactly when the connection closes, and a JSON error body
//     {"code": n, "message": "..."} that a JSON parser reads back (the
//     message may be the JSON parser's, quoting the client's bytes);
//   - a call has a route, one request message when the call is unary (any
//     number when the client streams), each of which decodes as the
//     route's request type, and its token lies in the request's bytes;
//   - a request followed by another (pipelined) maps the same and takes
//     the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>

#include "http/gateway_request.h"

namespace {

namespace pb = google::protobuf;
using etcdq::http::GatewayRequest;
using etcdq::http::GatewayRoutes;

// On a failure, `context` (the answer, say) is printed before the abort.
void check(bool ok, std::string_view context = {}) {
  if (ok) return;
  if (!context.empty()) std::fprintf(stderr, "failed on: %.*s\n", static_cast<int>(context.size()), context.data());
  std::abort();
}

const GatewayRoutes& routes() {
  static const GatewayRoutes r = etcdq::http::gateway_routes();
  return r;
}

void check_answer(const GatewayRequest& g) {
  const std::string& a = g.answer;
  check(a.compare(0, 9, "HTTP/1.1 ") == 0 && a.size() > 13, a);
  check(a[9] >= '1' && a[9] <= '5' && a[10] >= '0' && a[10] <= '9' && a[11] >= '0' && a[11] <= '9', a);
  check(a[12] == ' ', a);
  size_t end = a.find("\r\n\r\n");
  check(end != std::string::npos, a);
  std::string_view head(a.data(), end + 2);
  std::string_view body = std::string_view(a).substr(end + 4);
  size_t cl = head.find("\r\nContent-Length: ");
  check(cl != std::string_view::npos && head.find("\r\nContent-Length: ", cl + 1) == std::string_view::npos, a);
  check(std::strtoull(head.data() + cl + 18, nullptr, 10) == body.size(), a);
  check((head.find("\r\nConnection: close\r\n") != std::string_view::npos) == !g.keep_open, a);
  if (body.empty()) return;
  pb::Struct json;
  check(pb::util::JsonStringToMessage(body, &json).ok(), a);
  auto code = json.fields().find("code");
  auto message = json.fields().find("message");
  check(code != json.fields().end() && code->second.has_number_value(), a);
  check(message != json.fields().end() && message->second.has_string_value(), a);
  check(json.fields().size() == 2, a);
}

void check_call(const GatewayRequest& g, const std::string& in) {
  check(g.route != nullptr);
  // A stream's empty body is a call that half-closes at once.
  if (!g.route->client_streaming) check(g.messages.size() == 1);
  const pb::Message* proto = pb::MessageFactory::generated_factory()->GetPrototype(g.route->request);
  for (const std::string& bytes : g.messages) {
    std::unique_ptr<pb::Message> m(proto->New());
    check(m->ParseFromString(bytes));
  }
  if (!g.token.empty()) check(g.token.data() >= in.data() && g.token.data() + g.token.size() <= in.data() + in.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" per input
  routes();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  GatewayRequest g = etcdq::http::map_gateway_request(routes(), in, /*last=*/false);
  check(g.consumed <= in.size());
  const bool http = g.answer != "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  if (!http) check(g.consumed == in.size() && !g.keep_open);
  if (!g.answer.empty()) {
    check(g.route == nullptr && g.messages.empty());
    check_answer(g);
  } else {
    check_call(g, in);
  }
  if (!http) return 0;

  std::string pipelined = in + "POST /v3/kv/range HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
  GatewayRequest p = etcdq::http::map_gateway_request(routes(), pipelined, /*last=*/false);
  check(p.consumed == g.consumed && p.keep_open == g.keep_open && p.answer == g.answer && p.route == g.route &&
        p.messages == g.messages && p.token == g.token);
  return 0;
}
