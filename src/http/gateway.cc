#include "http/gateway.h"

#include "http/gateway_request.h"
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

// grpc-gateway v2's stream error chunk (runtime.errorChunk: the status
// under "error"; v1's, in etcd 3.4, had grpc_code, http_code, message and
// http_status).
std::string stream_error(grpc::StatusCode code, const std::string& message) {
  return "{\"error\":" + gateway_error_body(code, message) + "}";
}

std::string chunk(const std::string& data) {
  char len[32];
  std::snprintf(len, sizeof(len), "%zx\r\n", data.size());
  return len + data + "\r\n";
}

pb::util::JsonPrintOptions print_options() {
  pb::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;  // JSONPb{OrigName: true}
  o.always_print_primitive_fields = false;
  return o;
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
  Call(const GatewayRoute* route, std::vector<grpc::ByteBuffer> requests, std::shared_ptr<Reply> reply, bool keep_open,
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
      out = gateway_head(200, "application/json", true, keep_open_) + "Transfer-Encoding: chunked\r\n\r\n";
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
        reply_->write(gateway_whole(200, "application/json", true, keep_open_, result_));
      } else {
        reply_->write(gateway_error_answer(status.ok() ? grpc::StatusCode::INTERNAL : status.error_code(),
                                   status.ok() ? "no response" : status.error_message(), keep_open_));
      }
    } else if (!sent_head_) {
      if (status.ok()) {
        reply_->write(gateway_head(200, "application/json", true, keep_open_) + "Transfer-Encoding: chunked\r\n\r\n" +
                      "0\r\n\r\n");
      } else {
        reply_->write(gateway_error_answer(status.error_code(), status.error_message(), keep_open_));
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

  const GatewayRoute* route_;
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
  GatewayRoutes routes;  // by path under a prefix
};

Gateway::Gateway(std::shared_ptr<grpc::Channel> channel, std::function<uint64_t()> grpc_unary_started)
    : impl_(new Impl(std::move(channel), std::move(grpc_unary_started))) {
  impl_->routes = gateway_routes();
}

Gateway::~Gateway() = default;

bool Gateway::wants(const std::string& request) {
  size_t sp = request.find(' ');
  if (sp == std::string::npos) return false;
  std::string_view target = std::string_view(request).substr(sp + 1, 16);
  for (std::string_view p : kGatewayPrefixes) {
    if (target.substr(0, p.size()) == p) return true;
  }
  return false;
}

size_t Gateway::max_body_bytes(size_t max_request_bytes) {
  return 2 * (max_request_bytes + 512 * 1024) + (64 << 10);
}

size_t Gateway::serve(const std::string& in, bool last, std::string* out, bool* keep_open,
                      std::shared_ptr<Reply>* later) {
  GatewayRequest req = map_gateway_request(impl_->routes, in, last);
  *keep_open = req.keep_open;
  if (!req.answer.empty()) {
    *out = std::move(req.answer);
    return req.consumed;
  }
  const GatewayRoute& route = *req.route;
  std::vector<grpc::ByteBuffer> requests;
  for (const std::string& bytes : req.messages) {
    grpc::Slice slice(bytes);
    requests.emplace_back(&slice, 1);
  }
  auto reply = std::make_shared<Reply>();
  // Streams, Lock and Campaign may live for hours (the last two until
  // another client lets go, maybe through this gateway): not counted.
  if (route.streaming || route.waits) {
    Call::start(std::make_shared<Call>(&route, std::move(requests), reply, *keep_open, nullptr), impl_->stub.get(),
                req.token);
  } else {
    auto call = std::make_shared<Call>(&route, std::move(requests), reply, *keep_open, impl_->admission);
    impl_->admission->admit([call, stub = impl_->stub, token = std::string(req.token)] {
      Call::start(call, stub.get(), token);
    });
  }
  *later = std::move(reply);
  return req.consumed;
}

}  // namespace etcdq::http
