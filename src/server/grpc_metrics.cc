#include "server/grpc_metrics.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>

#include "server/maintenance_service.h"

namespace etcdq::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

// grpc-go's codes.Code.String(), by number.
const char* const kCodeNames[17] = {"OK",
                                    "Canceled",
                                    "Unknown",
                                    "InvalidArgument",
                                    "DeadlineExceeded",
                                    "NotFound",
                                    "AlreadyExists",
                                    "PermissionDenied",
                                    "ResourceExhausted",
                                    "FailedPrecondition",
                                    "Aborted",
                                    "OutOfRange",
                                    "Unimplemented",
                                    "Internal",
                                    "Unavailable",
                                    "DataLoss",
                                    "Unauthenticated"};

// etcd's client byte counters (v3rpc/codec.go), registered once.
prometheus::Counter& client_received_bytes() {
  static prometheus::Counter& c = metrics::counter("etcd_network_client_grpc_received_bytes_total",
                                                   "The total number of bytes received from grpc clients.");
  return c;
}

prometheus::Counter& client_sent_bytes() {
  static prometheus::Counter& c =
      metrics::counter("etcd_network_client_grpc_sent_bytes_total", "The total number of bytes sent to grpc clients.");
  return c;
}

struct Families {
  prometheus::Family<prometheus::Counter>& started = prometheus::BuildCounter()
                                                         .Name("grpc_server_started_total")
                                                         .Help("Total number of RPCs started on the server.")
                                                         .Register(metrics::registry());
  prometheus::Family<prometheus::Counter>& handled =
      prometheus::BuildCounter()
          .Name("grpc_server_handled_total")
          .Help("Total number of RPCs completed on the server, regardless of success or failure.")
          .Register(metrics::registry());
  prometheus::Family<prometheus::Counter>& received =
      prometheus::BuildCounter()
          .Name("grpc_server_msg_received_total")
          .Help("Total number of RPC stream messages received on the server.")
          .Register(metrics::registry());
  prometheus::Family<prometheus::Counter>& sent = prometheus::BuildCounter()
                                                      .Name("grpc_server_msg_sent_total")
                                                      .Help("Total number of gRPC stream messages sent by the server.")
                                                      .Register(metrics::registry());
  prometheus::Counter& received_bytes = client_received_bytes();
  prometheus::Counter& sent_bytes = client_sent_bytes();
  // etcd_server_client_requests_total{type,client_api_version}: by the
  // client-api-version metadata clientv3 sends ("3.6"), "unknown" without
  // it (etcd's v3rpc interceptors). etcd takes any string as the label; a
  // client could then grow the scrape without bound, so here only 3.0 to
  // 3.9 get their own series and anything else counts as "unknown".
  // Atomics, no lock: counted on every call.
  static constexpr int kVersions = 11;  // "unknown", then "3.0" .. "3.9"
  std::atomic<uint64_t> client_requests[2][kVersions] = {};  // [stream][version]
  std::unique_ptr<metrics::SourceHandle> client_requests_source =
      metrics::add_source([this](std::vector<prometheus::MetricFamily>* out) {
        auto f = metrics::family("etcd_server_client_requests_total",
                                 "The total number of client requests per client version.",
                                 prometheus::MetricType::Counter);
        for (int stream = 0; stream < 2; ++stream) {
          for (int v = 0; v < kVersions; ++v) {
            uint64_t n = client_requests[stream][v].load(std::memory_order_relaxed);
            if (n == 0) continue;
            std::string version = v == 0 ? "unknown" : "3." + std::to_string(v - 1);
            metrics::add_sample(&f, static_cast<double>(n),
                                {{"client_api_version", version}, {"type", stream ? "stream" : "unary"}});
          }
        }
        if (!f.metric.empty()) out->push_back(std::move(f));
      });

  void count_client_request(bool stream, std::string_view version) {
    int v = 0;
    if (version.size() == 3 && version[0] == '3' && version[1] == '.' && version[2] >= '0' && version[2] <= '9') {
      v = 1 + (version[2] - '0');
    }
    client_requests[stream ? 1 : 0][v].fetch_add(1, std::memory_order_relaxed);
  }
};

Families& families() {
  static Families* f = new Families;
  return *f;
}

class Interceptor final : public grpc::experimental::Interceptor {
 public:
  explicit Interceptor(const GrpcMetrics::Method* m) : m_(m) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* b) override {
    if (b->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      std::string_view version;
      if (auto* md = b->GetRecvInitialMetadata()) {
        auto it = md->find("client-api-version");
        if (it != md->end()) version = std::string_view(it->second.data(), it->second.size());
      }
      families().count_client_request(!m_->unary_type, version);
    }
    if (b->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      if (const void* msg = b->GetRecvMessage()) {
        m_->received->Increment();
        // Only generated methods get an interceptor (below): a protobuf
        // message, or the bytes of one for a method registered raw.
        size_t n = m_->raw ? static_cast<const grpc::ByteBuffer*>(msg)->Length()
                           : static_cast<const google::protobuf::MessageLite*>(msg)->ByteSizeLong();
        families().received_bytes.Increment(static_cast<double>(n));
      }
    }
    if (b->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      m_->sent->Increment();
      // Serializes now what gRPC would serialize next anyway.
      if (grpc::ByteBuffer* buf = b->GetSerializedSendMessage()) {
        families().sent_bytes.Increment(static_cast<double>(buf->Length()));
      }
    }
    if (b->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      int code = static_cast<int>(b->GetSendStatus().error_code());
      // A failed unary call sent no message; etcd 3.6 counts one (header).
      if (m_->unary_type && code != 0) m_->sent->Increment();
      m_->handled[code >= 0 && code < 17 ? code : 2]->Increment();
    }
    b->Proceed();
  }

 private:
  const GrpcMetrics::Method* m_;
};

const char* type_name(bool client_streaming, bool server_streaming) {
  if (client_streaming && server_streaming) return "bidi_stream";
  if (client_streaming) return "client_stream";
  if (server_streaming) return "server_stream";
  return "unary";
}

}  // namespace

void register_client_metrics() {
  client_received_bytes();
  client_sent_bytes();
  // The version etcdq answers as (Status, /version), as etcd's gauges.
  static bool versions_once = [] {
    std::string v = kEtcdApiVersion;
    prometheus::BuildGauge()
        .Name("etcd_server_version")
        .Help("Which version is running. 1 for 'server_version' label with current version.")
        .Register(metrics::registry())
        .Add({{"server_version", v}})
        .Set(1);
    prometheus::BuildGauge()
        .Name("etcd_cluster_version")
        .Help("Which version is running. 1 for 'cluster_version' label with current cluster version")
        .Register(metrics::registry())
        .Add({{"cluster_version", v.substr(0, v.rfind('.'))}})
        .Set(1);
    return true;
  }();
  (void)versions_once;
}

GrpcMetrics::GrpcMetrics(const std::vector<std::string>& services, const std::vector<std::string>& raw_methods,
                         std::shared_ptr<std::atomic<uint64_t>> unary_started)
    : unary_started_(std::move(unary_started)) {
  Families& f = families();
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const auto& name : services) {
    const google::protobuf::ServiceDescriptor* sd = pool->FindServiceByName(name);
    if (!sd) continue;
    for (int i = 0; i < sd->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* md = sd->method(i);
      prometheus::Labels l{{"grpc_type", type_name(md->client_streaming(), md->server_streaming())},
                           {"grpc_service", name},
                           {"grpc_method", md->name()}};
      Method m{};
      m.started = &f.started.Add(l);
      m.received = &f.received.Add(l);
      m.sent = &f.sent.Add(l);
      // Lock and Campaign wait for other clients, maybe for hours: a client
      // waiting there is not load.
      bool waits = (name == "v3lockpb.Lock" && md->name() == "Lock") ||
                   (name == "v3electionpb.Election" && md->name() == "Campaign");
      m.unary_type = !md->client_streaming() && !md->server_streaming();
      m.unary = m.unary_type && !waits;
      for (int c = 0; c < 17; ++c) {
        prometheus::Labels lc = l;
        lc["grpc_code"] = kCodeNames[c];
        m.handled[c] = &f.handled.Add(lc);
      }
      std::string path = "/" + name + "/" + md->name();
      m.raw = std::find(raw_methods.begin(), raw_methods.end(), path) != raw_methods.end();
      methods_.emplace(path, m);
    }
  }
  register_client_metrics();
}

grpc::experimental::Interceptor* GrpcMetrics::CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) {
  auto it = methods_.find(info->method());
  if (it == methods_.end()) return nullptr;
  it->second.started->Increment();
  if (it->second.unary && unary_started_) unary_started_->fetch_add(1, std::memory_order_relaxed);
  return new Interceptor(&it->second);
}

}  // namespace etcdq::server
