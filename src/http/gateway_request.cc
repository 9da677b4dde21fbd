#include "http/gateway_request.h"

#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>
#include <strings.h>

#include <cstdio>
#include <memory>
#include <utility>

#include "http/gateway.h"
#include "http/reply.h"

namespace etcdq::http {
namespace {

namespace pb = google::protobuf;

// etcd's google.api.http annotations: path under the prefix -> method.
constexpr std::pair<const char*, const char*> kRoutes[] = {
    {"kv/range", "etcdserverpb.KV.Range"},
    {"kv/put", "etcdserverpb.KV.Put"},
    {"kv/deleterange", "etcdserverpb.KV.DeleteRange"},
    {"kv/txn", "etcdserverpb.KV.Txn"},
    {"kv/compaction", "etcdserverpb.KV.Compact"},
    {"watch", "etcdserverpb.Watch.Watch"},
    {"lease/grant", "etcdserverpb.Lease.LeaseGrant"},
    {"lease/revoke", "etcdserverpb.Lease.LeaseRevoke"},
    {"kv/lease/revoke", "etcdserverpb.Lease.LeaseRevoke"},
    {"lease/keepalive", "etcdserverpb.Lease.LeaseKeepAlive"},
    {"lease/timetolive", "etcdserverpb.Lease.LeaseTimeToLive"},
    {"kv/lease/timetolive", "etcdserverpb.Lease.LeaseTimeToLive"},
    {"lease/leases", "etcdserverpb.Lease.LeaseLeases"},
    {"kv/lease/leases", "etcdserverpb.Lease.LeaseLeases"},
    {"cluster/member/add", "etcdserverpb.Cluster.MemberAdd"},
    {"cluster/member/remove", "etcdserverpb.Cluster.MemberRemove"},
    {"cluster/member/update", "etcdserverpb.Cluster.MemberUpdate"},
    {"cluster/member/list", "etcdserverpb.Cluster.MemberList"},
    {"cluster/member/promote", "etcdserverpb.Cluster.MemberPromote"},
    {"maintenance/alarm", "etcdserverpb.Maintenance.Alarm"},
    {"maintenance/status", "etcdserverpb.Maintenance.Status"},
    {"maintenance/defragment", "etcdserverpb.Maintenance.Defragment"},
    {"maintenance/hash", "etcdserverpb.Maintenance.Hash"},
    {"maintenance/hashkv", "etcdserverpb.Maintenance.HashKV"},
    {"maintenance/snapshot", "etcdserverpb.Maintenance.Snapshot"},
    {"maintenance/transfer-leadership", "etcdserverpb.Maintenance.MoveLeader"},
    {"maintenance/downgrade", "etcdserverpb.Maintenance.Downgrade"},
    {"auth/enable", "etcdserverpb.Auth.AuthEnable"},
    {"auth/disable", "etcdserverpb.Auth.AuthDisable"},
    {"auth/status", "etcdserverpb.Auth.AuthStatus"},
    {"auth/authenticate", "etcdserverpb.Auth.Authenticate"},
    {"auth/user/add", "etcdserverpb.Auth.UserAdd"},
    {"auth/user/get", "etcdserverpb.Auth.UserGet"},
    {"auth/user/list", "etcdserverpb.Auth.UserList"},
    {"auth/user/delete", "etcdserverpb.Auth.UserDelete"},
    {"auth/user/changepw", "etcdserverpb.Auth.UserChangePassword"},
    {"auth/user/grant", "etcdserverpb.Auth.UserGrantRole"},
    {"auth/user/revoke", "etcdserverpb.Auth.UserRevokeRole"},
    {"auth/role/add", "etcdserverpb.Auth.RoleAdd"},
    {"auth/role/get", "etcdserverpb.Auth.RoleGet"},
    {"auth/role/list", "etcdserverpb.Auth.RoleList"},
    {"auth/role/delete", "etcdserverpb.Auth.RoleDelete"},
    {"auth/role/grant", "etcdserverpb.Auth.RoleGrantPermission"},
    {"auth/role/revoke", "etcdserverpb.Auth.RoleRevokePermission"},
    {"lock/lock", "v3lockpb.Lock.Lock"},
    {"lock/unlock", "v3lockpb.Lock.Unlock"},
    {"election/campaign", "v3electionpb.Election.Campaign"},
    {"election/proclaim", "v3electionpb.Election.Proclaim"},
    {"election/leader", "v3electionpb.Election.Leader"},
    {"election/observe", "v3electionpb.Election.Observe"},
    {"election/resign", "v3electionpb.Election.Resign"},
};

// grpc-gateway sets these on every answer (etcd adds the CORS ones).
constexpr const char* kCommonHeaders =
    "Access-Control-Allow-Headers: accept, content-type, authorization\r\n"
    "Access-Control-Allow-Methods: POST, GET, OPTIONS, PUT, DELETE\r\n"
    "Access-Control-Allow-Origin: *\r\n";

// The length of the well-formed UTF-8 sequence (RFC 3629: no overlong
// form, no surrogate, at most U+10FFFF) that starts `s`, or 0.
size_t utf8_sequence(std::string_view s) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char b0 = byte(0);
  size_t n = b0 >= 0xf0 ? 4 : b0 >= 0xe0 ? 3 : 2;
  if (b0 < 0xc2 || b0 > 0xf4 || s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
  }
  if (b0 == 0xe0 && byte(1) < 0xa0) return 0;   // overlong
  if (b0 == 0xed && byte(1) >= 0xa0) return 0;  // a surrogate
  if (b0 == 0xf0 && byte(1) < 0x90) return 0;   // overlong
  if (b0 == 0xf4 && byte(1) >= 0x90) return 0;  // past U+10FFFF
  return n;
}

// A JSON string as Go's encoding/json writes it: its escapes, and bytes
// that are not UTF-8 replaced with U+FFFD. (The message may be the JSON
// parser's, quoting the client's bytes: fuzz/fuzz_gateway.cc found an
// error body that was not UTF-8, so not JSON.)
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x80) {
      size_t n = utf8_sequence(s.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s, i, n);
        i += n;
      }
      continue;
    }
    ++i;
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '<': out += "\\u003c"; break;  // Go's encoding/json escapes these
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

// The body's top-level JSON values, in order (a stream's body holds one
// or more request objects back to back). A value that does not close is
// returned whole (its parse then fails).
std::vector<std::string_view> split_values(std::string_view body) {
  std::vector<std::string_view> out;
  size_t i = 0;
  for (;;) {
    while (i < body.size() && (body[i] == ' ' || body[i] == '\n' || body[i] == '\r' || body[i] == '\t')) ++i;
    if (i >= body.size()) return out;
    size_t start = i;
    if (body[i] != '{' && body[i] != '[') {  // not an object: the rest, to be refused
      out.push_back(body.substr(start));
      return out;
    }
    int depth = 0;
    bool in_string = false;
    for (; i < body.size(); ++i) {
      char ch = body[i];
      if (in_string) {
        if (ch == '\\') ++i;
        else if (ch == '"') in_string = false;
        continue;
      }
      if (ch == '"') in_string = true;
      else if (ch == '{' || ch == '[') ++depth;
      else if ((ch == '}' || ch == ']') && --depth == 0) break;
    }
    if (i >= body.size()) {
      out.push_back(body.substr(start));
      return out;
    }
    ++i;
    out.push_back(body.substr(start, i - start));
  }
}

pb::util::JsonParseOptions parse_options() {
  pb::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;  // as grpc-gateway's decoder (AllowUnknownFields)
  return o;
}

// A request as Connections handed it over: complete, in memory.
struct HttpRequest {
  std::string_view method, path, body, authorization;
  bool keep_alive = true;
  size_t consumed = 0;
};

bool header_is(std::string_view line, std::string_view name, std::string_view* value) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  if (strncasecmp(line.data(), name.data(), name.size()) != 0) return false;
  std::string_view v = line.substr(name.size() + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  *value = v;
  return true;
}

bool parse_request(const std::string& in, HttpRequest* r) {
  size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  std::string_view all(in);
  size_t eol = all.find("\r\n");
  std::string_view line = all.substr(0, eol);
  size_t sp1 = line.find(' ');
  size_t sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return false;
  r->method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r->path = target.substr(0, target.find('?'));
  std::string_view version = line.substr(sp2 + 1);
  r->keep_alive = version != "HTTP/1.0";
  size_t length = 0;
  for (size_t pos = eol + 2; pos < end;) {
    size_t next = all.find("\r\n", pos);
    std::string_view h = all.substr(pos, next - pos);
    pos = next + 2;
    std::string_view v;
    if (header_is(h, "content-length", &v)) {
      length = 0;
      for (char ch : v) {
        if (ch < '0' || ch > '9') return false;
        length = length * 10 + static_cast<size_t>(ch - '0');
      }
    } else if (header_is(h, "authorization", &v)) {
      r->authorization = v;
    } else if (header_is(h, "connection", &v)) {
      if (v.size() == 5 && strncasecmp(v.data(), "close", 5) == 0) r->keep_alive = false;
      if (v.size() == 10 && strncasecmp(v.data(), "keep-alive", 10) == 0) r->keep_alive = true;
    }
  }
  if (in.size() - (end + 4) < length) return false;
  r->body = all.substr(end + 4, length);
  r->consumed = end + 4 + length;
  return true;
}

}  // namespace

GatewayRoutes gateway_routes() {
  GatewayRoutes routes;
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  for (const auto& [path, name] : kRoutes) {
    const pb::MethodDescriptor* m = pool->FindMethodByName(name);
    if (m == nullptr) continue;  // not in our protos (Downgrade)
    GatewayRoute r;
    r.grpc_path = "/" + m->service()->full_name() + "/" + m->name();
    r.request = m->input_type();
    r.response = m->output_type();
    r.client_streaming = m->client_streaming();
    r.streaming = m->client_streaming() || m->server_streaming();
    r.waits = r.grpc_path == "/v3lockpb.Lock/Lock" || r.grpc_path == "/v3electionpb.Election/Campaign";
    routes.emplace(path, std::move(r));
  }
  return routes;
}

GatewayRequest map_gateway_request(const GatewayRoutes& routes, const std::string& in, bool last) {
  GatewayRequest out;
  HttpRequest req;
  if (!parse_request(in, &req)) {
    out.answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    out.keep_open = false;
    out.consumed = in.size();
    return out;
  }
  out.consumed = req.consumed;
  out.keep_open = req.keep_alive && !last;
  std::string_view rest;
  for (std::string_view p : kGatewayPrefixes) {
    if (req.path.substr(0, p.size()) == p) {
      rest = req.path.substr(p.size());
      break;
    }
  }
  auto it = routes.find(rest);
  // grpc-gateway v2's answers for no route and for a route's wrong method
  // (etcd 3.6; v1 answered plain text, 404 and 405).
  if (it == routes.end()) {
    out.answer = gateway_whole(404, "application/json", false, out.keep_open,
                               gateway_error_body(grpc::StatusCode::NOT_FOUND, "Not Found"));
    return out;
  }
  if (req.method != "POST") {
    out.answer = gateway_whole(501, "application/json", false, out.keep_open,
                               gateway_error_body(grpc::StatusCode::UNIMPLEMENTED, "Method Not Allowed"));
    return out;
  }
  const GatewayRoute& route = it->second;
  const pb::Message* proto = pb::MessageFactory::generated_factory()->GetPrototype(route.request);
  std::vector<std::string_view> values = split_values(req.body);
  // A unary request is one value (or none: the empty message); grpc-gateway
  // decodes the first and ignores what follows.
  if (!route.client_streaming && values.size() > 1) values.resize(1);
  if (!route.client_streaming && values.empty()) values.push_back("{}");
  for (size_t i = 0; i < values.size(); ++i) {
    std::unique_ptr<pb::Message> msg(proto->New());
    auto st = pb::util::JsonStringToMessage(values[i], msg.get(), parse_options());
    if (!st.ok()) {
      if (route.client_streaming && i > 0) break;  // grpc-gateway stops sending there
      // A unary body: InvalidArgument; a stream's first object: Unknown.
      out.answer = gateway_error_answer(
          route.client_streaming ? grpc::StatusCode::UNKNOWN : grpc::StatusCode::INVALID_ARGUMENT,
          std::string(st.message()), out.keep_open);
      out.messages.clear();
      return out;
    }
    out.messages.push_back(msg->SerializeAsString());
  }
  out.route = &route;
  out.token = req.authorization;
  return out;
}

std::string gateway_head(int status, const char* content_type, bool grpc_metadata, bool keep_open) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n" + kCommonHeaders +
                  "Content-Type: " + content_type + "\r\n";
  if (grpc_metadata) h += "Grpc-Metadata-Content-Type: application/grpc\r\n";
  if (!keep_open) h += "Connection: close\r\n";
  return h;
}

std::string gateway_whole(int status, const char* content_type, bool grpc_metadata, bool keep_open,
                          const std::string& body) {
  return gateway_head(status, content_type, grpc_metadata, keep_open) + "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// grpc-gateway v2's error body (etcd 3.6; v1's, in etcd 3.4, also had
// "error", a copy of the message): a google.rpc.Status as protojson writes
// it, its empty details left out.
std::string gateway_error_body(grpc::StatusCode code, const std::string& message) {
  return "{\"code\":" + std::to_string(static_cast<int>(code)) + ",\"message\":" + json_string(message) + "}";
}

std::string gateway_error_answer(grpc::StatusCode code, const std::string& message, bool keep_open) {
  return gateway_whole(http_status_of(code), "application/json", false, keep_open, gateway_error_body(code, message));
}

}  // namespace etcdq::http
