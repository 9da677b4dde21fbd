#include "http/gateway.h"

#include "http/reply.h"
#include "http/timer.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/generic/generic_stub.h>
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

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

constexpr std::string_view kPrefixes[] = {"/v3/", "/v3beta/", "/v3alpha/"};

struct Route {
  std::string grpc_path;  // "/etcdserverpb.KV/Range"
  const pb::Descriptor* request;
  const pb::Descriptor* response;
  bool client_streaming;
  bool streaming;  // either side streams: a chunked answer
  bool waits;      // Lock, Campaign: waits for other clients (Admission does not count it)
};

// grpc-gateway sets these on every answer (etcd adds the CORS ones).
constexpr const char* kCommonHeaders =
    "Access-Control-Allow-Headers: accept, content-type, authorization\r\n"
    "Access-Control-Allow-Methods: POST, GET, OPTIONS, PUT, DELETE\r\n"
    "Access-Control-Allow-Origin: *\r\n";

std::string head(int status, const char* content_type, bool grpc_metadata, bool keep_open) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n" + kCommonHeaders +
                  "Content-Type: " + content_type + "\r\n";
  if (grpc_metadata) h += "Grpc-Metadata-Content-Type: application/grpc\r\n";
  if (!keep_open) h += "Connection: close\r\n";
  return h;
}

std::string whole(int status, const char* content_type, bool grpc_metadata, bool keep_open, const std::string& body) {
  return head(status, content_type, grpc_metadata, keep_open) + "Content-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
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

// grpc-gateway v2's error body (etcd 3.6; v1's, in etcd 3.4, also had
// "error", a copy of the message): a google.rpc.Status as protojson writes
// it, its empty details left out.
std::string error_body(grpc::StatusCode code, const std::string& message) {
  return "{\"code\":" + std::to_string(static_cast<int>(code)) + ",\"message\":" + json_string(message) + "}";
}

std::string error_answer(grpc::StatusCode code, const std::string& message, bool keep_open) {
  return whole(http_status_of(code), "application/json", false, keep_open, error_body(code, message));
}

// grpc-gateway v2's stream error chunk (runtime.errorChunk: the status
// under "error"; v1's, in etcd 3.4, had grpc_code, http_code, message and
// http_status).
std::string stream_error(grpc::StatusCode code, const std::string& message) {
  return "{\"error\":" + error_body(code, message) + "}";
}

std::string chunk(const std::string& data) {
  char len[32];
  std::snprintf(len, sizeof(len), "%zx\r\n", data.size());
  return len + data + "\r\n";
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

pb::util::JsonPrintOptions print_options() {
  pb::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;  // JSONPb{OrigName: true}
  o.always_print_primitive_fields = false;
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

// The unary calls running at once: at most Gateway::kMaxUnaryCalls; while
// gRPC clients start unary calls (one started within kGrpcQuietWindow:
// `grpc_started` counts every unary call started, these included), calls
// start at most kRateBesideGrpc a second, one every 1/kRateBesideGrpc s
// (gateway.h says why). The others wait here, in arrival order. Shared
// with the calls, which may end after the gateway is gone.
class Admission : public std::enable_shared_from_this<Admission> {
 public:
  using Clock = std::chrono::steady_clock;
  Admission(std::function<uint64_t()> grpc_started, std::shared_ptr<Timer> timer)
      : grpc_started_(std::move(grpc_started)), timer_(std::move(timer)) {}
  // Runs `start` now, or once the limit and the rate allow.
  void admit(std::function<void()> start) {
    std::unique_lock<std::mutex> lock(mu_);
    waiting_.push_back(std::move(start));
    drain(std::move(lock));
  }
  // A running call ended.
  void release() {
    std::unique_lock<std::mutex> lock(mu_);
    --running_;
    drain(std::move(lock));
  }

 private:
  static constexpr Clock::duration kSpacing =
      std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(1)) / Gateway::kRateBesideGrpc;

  // Starts the longest waiting calls the limit allows; beside gRPC, one per
  // kSpacing (a timer comes back for the rest).
  void drain(std::unique_lock<std::mutex> lock) {
    std::vector<std::function<void()>> next;
    bool paced = beside_grpc() && timer_ != nullptr;
    auto now = Clock::now();
    while (!waiting_.empty() && running_ < Gateway::kMaxUnaryCalls) {
      if (paced) {
        if (now < not_before_) {
          if (!armed_) {
            armed_ = true;
            std::weak_ptr<Admission> weak = shared_from_this();
            timer_->after(not_before_ - now, [weak] {
              if (auto self = weak.lock()) {
                std::unique_lock<std::mutex> l(self->mu_);
                self->armed_ = false;
                self->drain(std::move(l));
              }
            });
          }
          break;
        }
        not_before_ = now + kSpacing;
      }
      next.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      ++running_;
      ++started_;  // before the server counts it: see beside_grpc()
    }
    lock.unlock();
    for (auto& fn : next) fn();
  }

  // Under mu_. The server counts a gateway call after this counted it, so
  // the calls others started (its count less this one's) can only dip for
  // a moment: a new highest value is a gRPC client's call.
  bool beside_grpc() {
    if (!grpc_started_) return false;
    auto now = Clock::now();
    int64_t others = static_cast<int64_t>(grpc_started_()) - static_cast<int64_t>(started_);
    if (others > most_others_) {
      most_others_ = others;
      grpc_seen_ = now;
    }
    return now - grpc_seen_ < Gateway::kGrpcQuietWindow;
  }

  std::function<uint64_t()> grpc_started_;
  std::shared_ptr<Timer> timer_;
  std::mutex mu_;
  size_t running_ = 0;
  std::deque<std::function<void()>> waiting_;
  Clock::time_point not_before_;  // beside gRPC: no call starts before
  bool armed_ = false;            // a timer comes back to drain at not_before_
  uint64_t started_ = 0;          // calls this started
  int64_t most_others_ = 0;       // the most calls others had started, when last seen growing
  Clock::time_point grpc_seen_;   // when a gRPC client's call was last seen starting
};

// One gateway call: its requests written, its responses read, on gRPC's
// threads; answers through the reply. Owns itself from start() to OnDone.
class Call final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `admission`: the one that started this call, told when it ends (none
  // for a stream).
  Call(const Route* route, std::vector<grpc::ByteBuffer> requests, std::shared_ptr<Reply> reply, bool keep_open,
       std::shared_ptr<Admission> admission)
      : route_(route),
        requests_(std::move(requests)),
        reply_(std::move(reply)),
        keep_open_(keep_open),
        admission_(std::move(admission)) {}

  static void start(std::shared_ptr<Call> call, grpc::GenericStub* stub, std::string_view token) {
    Call* c = call.get();
    c->self_ = call;
    if (!token.empty()) c->ctx_.AddMetadata("token", std::string(token));
    std::weak_ptr<Call> weak = call;
    c->reply_->set_callbacks(
        [weak] {
          if (auto p = weak.lock()) p->resume();
        },
        [weak] {
          if (auto p = weak.lock()) p->cancel();
        });
    stub->PrepareBidiStreamingCall(&c->ctx_, c->route_->grpc_path, grpc::StubOptions(), c);
    c->write_next();
    c->StartRead(&c->in_);
    c->StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the call ended; OnDone says how
    write_next();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    std::unique_ptr<pb::Message> msg(pb::MessageFactory::generated_factory()->GetPrototype(route_->response)->New());
    std::string json;
    std::string bytes;
    std::vector<grpc::Slice> slices;
    if (in_.Dump(&slices).ok()) {
      for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    if (!msg->ParseFromString(bytes) || !pb::util::MessageToJsonString(*msg, &json, print_options()).ok()) {
      failed_ = grpc::Status(grpc::StatusCode::INTERNAL, "cannot convert the response to JSON");
      ctx_.TryCancel();
      return;
    }
    if (!route_->streaming) {
      result_ = std::move(json);
      have_result_ = true;
      StartRead(&in_);
      return;
    }
    std::string out;
    if (!sent_head_) {
      sent_head_ = true;
      out = head(200, "application/json", true, keep_open_) + "Transfer-Encoding: chunked\r\n\r\n";
    }
    out += chunk("{\"result\":" + json + "}\n");
    switch (reply_->write(out)) {
      case Reply::Write::kMore:
        StartRead(&in_);
        break;
      case Reply::Write::kPaused: {
        // Hold the call until the reader caught up (resume) or left
        // (cancel); the hold keeps OnDone away meanwhile.
        std::lock_guard<std::mutex> lock(mu_);
        paused_ = true;
        AddHold();
        break;
      }
      case Reply::Write::kGone:
        ctx_.TryCancel();
        break;
    }
  }

  void OnDone(const grpc::Status& s) override {
    grpc::Status status = failed_.ok() ? s : failed_;
    if (!route_->streaming) {
      if (status.ok() && have_result_) {
        reply_->write(whole(200, "application/json", true, keep_open_, result_));
      } else {
        reply_->write(error_answer(status.ok() ? grpc::StatusCode::INTERNAL : status.error_code(),
                                   status.ok() ? "no response" : status.error_message(), keep_open_));
      }
    } else if (!sent_head_) {
      if (status.ok()) {
        reply_->write(head(200, "application/json", true, keep_open_) + "Transfer-Encoding: chunked\r\n\r\n" +
                      "0\r\n\r\n");
      } else {
        reply_->write(error_answer(status.error_code(), status.error_message(), keep_open_));
      }
    } else {
      std::string tail;
      if (!status.ok()) tail = chunk(stream_error(status.error_code(), status.error_message()));
      reply_->write(tail + "0\r\n\r\n");
    }
    reply_->finish(keep_open_);
    std::shared_ptr<Admission> admission = std::move(admission_);
    self_.reset();  // may delete this
    if (admission) admission->release();  // may start a waiting call, on this thread
  }

 private:
  void write_next() {
    if (next_ + 1 == requests_.size()) {
      // The last request carries the half-close (the body's end, as
      // grpc-gateway's CloseSend): one operation, as a unary call sends it.
      // Sent apart, gRPC 1.51's in-process transport kept ~20 KiB per call
      // whose server answered before the half-close arrived (a serializable
      // Range: 1.4 GiB after 65k calls); together, RSS stays flat.
      writes_done_ = true;
      StartWriteLast(&requests_[next_++], grpc::WriteOptions());
    } else if (next_ < requests_.size()) {
      StartWrite(&requests_[next_++]);
    } else if (!writes_done_) {
      writes_done_ = true;
      StartWritesDone();  // the body's end: half-close, as grpc-gateway's CloseSend
    }
  }

  void resume() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!paused_) return;
      paused_ = false;
    }
    StartRead(&in_);
    RemoveHold();
  }

  void cancel() {
    ctx_.TryCancel();
    bool was_paused;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was_paused = paused_;
      paused_ = false;
    }
    if (was_paused) RemoveHold();
  }

  const Route* route_;
  std::vector<grpc::ByteBuffer> requests_;
  size_t next_ = 0;
  bool writes_done_ = false;
  std::shared_ptr<Reply> reply_;
  bool keep_open_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer in_;
  std::string result_;
  bool have_result_ = false;
  bool sent_head_ = false;
  grpc::Status failed_;
  std::shared_ptr<Admission> admission_;
  std::mutex mu_;  // guards paused_
  bool paused_ = false;
  std::shared_ptr<Call> self_;
};

}  // namespace

int http_status_of(grpc::StatusCode code) {
  // grpc-gateway v2's runtime.HTTPStatusFromCode (etcd 3.6; v1, in etcd 3.4
  // and 3.5, answered Canceled 408 and FailedPrecondition 412).
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::CANCELLED: return 499;
    case grpc::StatusCode::UNKNOWN: return 500;
    case grpc::StatusCode::INVALID_ARGUMENT: return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS: return 409;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::FAILED_PRECONDITION: return 400;
    case grpc::StatusCode::ABORTED: return 409;
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::INTERNAL: return 500;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::DATA_LOSS: return 500;
    default: return 500;
  }
}

struct Gateway::Impl {
  Impl(std::shared_ptr<grpc::Channel> ch, std::function<uint64_t()> grpc_started)
      : channel(std::move(ch)),
        stub(std::make_shared<grpc::GenericStub>(channel)),
        timer(grpc_started ? std::make_shared<Timer>() : nullptr),
        admission(std::make_shared<Admission>(std::move(grpc_started), timer)) {}
  ~Impl() {
    if (timer) timer->stop();  // calls still pausing are dropped (their connections close)
  }
  std::shared_ptr<grpc::Channel> channel;
  std::shared_ptr<grpc::GenericStub> stub;  // shared with the calls still waiting to start
  std::shared_ptr<Timer> timer;  // the pauses beside gRPC
  std::shared_ptr<Admission> admission;
  std::map<std::string, Route, std::less<>> routes;  // by path under a prefix
};

Gateway::Gateway(std::shared_ptr<grpc::Channel> channel, std::function<uint64_t()> grpc_unary_started)
    : impl_(new Impl(std::move(channel), std::move(grpc_unary_started))) {
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  for (const auto& [path, name] : kRoutes) {
    const pb::MethodDescriptor* m = pool->FindMethodByName(name);
    if (m == nullptr) continue;  // not in our protos (Downgrade)
    Route r;
    r.grpc_path = "/" + m->service()->full_name() + "/" + m->name();
    r.request = m->input_type();
    r.response = m->output_type();
    r.client_streaming = m->client_streaming();
    r.streaming = m->client_streaming() || m->server_streaming();
    r.waits = r.grpc_path == "/v3lockpb.Lock/Lock" || r.grpc_path == "/v3electionpb.Election/Campaign";
    impl_->routes.emplace(path, std::move(r));
  }
}

Gateway::~Gateway() = default;

bool Gateway::wants(const std::string& request) {
  size_t sp = request.find(' ');
  if (sp == std::string::npos) return false;
  std::string_view target = std::string_view(request).substr(sp + 1, 16);
  for (std::string_view p : kPrefixes) {
    if (target.substr(0, p.size()) == p) return true;
  }
  return false;
}

size_t Gateway::max_body_bytes(size_t max_request_bytes) {
  return 2 * (max_request_bytes + 512 * 1024) + (64 << 10);
}

size_t Gateway::serve(const std::string& in, bool last, std::string* out, bool* keep_open,
                      std::shared_ptr<Reply>* later) {
  HttpRequest req;
  if (!parse_request(in, &req)) {
    *out = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    *keep_open = false;
    return in.size();
  }
  *keep_open = req.keep_alive && !last;
  std::string_view rest;
  for (std::string_view p : kPrefixes) {
    if (req.path.substr(0, p.size()) == p) {
      rest = req.path.substr(p.size());
      break;
    }
  }
  auto it = impl_->routes.find(rest);
  // grpc-gateway v2's answers for no route and for a route's wrong method
  // (etcd 3.6; v1 answered plain text, 404 and 405).
  if (it == impl_->routes.end()) {
    *out = whole(404, "application/json", false, *keep_open, error_body(grpc::StatusCode::NOT_FOUND, "Not Found"));
    return req.consumed;
  }
  if (req.method != "POST") {
    *out = whole(501, "application/json", false, *keep_open,
                 error_body(grpc::StatusCode::UNIMPLEMENTED, "Method Not Allowed"));
    return req.consumed;
  }
  const Route& route = it->second;
  const pb::Message* proto = pb::MessageFactory::generated_factory()->GetPrototype(route.request);
  std::vector<std::string_view> values = split_values(req.body);
  // A unary request is one value (or none: the empty message); grpc-gateway
  // decodes the first and ignores what follows.
  if (!route.client_streaming && values.size() > 1) values.resize(1);
  if (!route.client_streaming && values.empty()) values.push_back("{}");
  std::vector<grpc::ByteBuffer> requests;
  for (size_t i = 0; i < values.size(); ++i) {
    std::unique_ptr<pb::Message> msg(proto->New());
    auto st = pb::util::JsonStringToMessage(values[i], msg.get(), parse_options());
    if (!st.ok()) {
      if (route.client_streaming && i > 0) break;  // grpc-gateway stops sending there
      // A unary body: InvalidArgument; a stream's first object: Unknown.
      *out = error_answer(route.client_streaming ? grpc::StatusCode::UNKNOWN : grpc::StatusCode::INVALID_ARGUMENT,
                          std::string(st.message()), *keep_open);
      return req.consumed;
    }
    std::string bytes = msg->SerializeAsString();
    grpc::Slice slice(bytes);
    requests.emplace_back(&slice, 1);
  }
  auto reply = std::make_shared<Reply>();
  // Streams, Lock and Campaign may live for hours (the last two until
  // another client lets go, maybe through this gateway): not counted.
  if (route.streaming || route.waits) {
    Call::start(std::make_shared<Call>(&route, std::move(requests), reply, *keep_open, nullptr), impl_->stub.get(),
                req.authorization);
  } else {
    auto call = std::make_shared<Call>(&route, std::move(requests), reply, *keep_open, impl_->admission);
    impl_->admission->admit([call, stub = impl_->stub, token = std::string(req.authorization)] {
      Call::start(call, stub.get(), token);
    });
  }
  *later = std::move(reply);
  return req.consumed;
}

}  // namespace etcdq::http
