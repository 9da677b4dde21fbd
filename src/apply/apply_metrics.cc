#include "apply/apply_metrics.h"

#include <array>
#include <memory>

#include "common/metrics.h"

namespace etcdq::apply {
namespace {

constexpr double kSlowApplySeconds = 0.1;  // etcd's default --warning-apply-duration

// etcd's op label for each request (uber_applier.go dispatch; the member
// attributes as server.go's applyEntryNormal names them).
const char* apply_op_name(Command::RequestCase op) {
  switch (op) {
    case Command::kPut: return "Put";
    case Command::kDeleteRange: return "DeleteRange";
    case Command::kTxn: return "Txn";
    case Command::kCompaction: return "Compaction";
    case Command::kLeaseGrant: return "LeaseGrant";
    case Command::kLeaseRevoke: return "LeaseRevoke";
    case Command::kAlarm: return "Alarm";
    case Command::kMemberAttributes: return "ClusterMemberAttrSet";
    case Command::kQueueAssign: return "QueueAssign";
    case Command::kAuthEnable: return "AuthEnable";
    case Command::kAuthDisable: return "AuthDisable";
    case Command::kUserAdd: return "AuthUserAdd";
    case Command::kUserDelete: return "AuthUserDelete";
    case Command::kUserChangePassword: return "AuthUserChangePassword";
    case Command::kUserGrantRole: return "AuthUserGrantRole";
    case Command::kUserRevokeRole: return "AuthUserRevokeRole";
    case Command::kRoleAdd: return "AuthRoleAdd";
    case Command::kRoleDelete: return "AuthRoleDelete";
    case Command::kRoleGrantPermission: return "AuthRoleGrantPermission";
    case Command::kRoleRevokePermission: return "AuthRoleRevokePermission";
    default: return "unknown";
  }
}

// One histogram per (request case, success); request cases are small
// field numbers (command.proto), so an array indexed by them.
constexpr int kMaxCase = 64;

struct ApplyMetrics {
  std::array<std::array<std::unique_ptr<metrics::FastHistogram>, 2>, kMaxCase> seconds;
  prometheus::Counter& slow =
      metrics::counter("etcd_server_slow_apply_total",
                       "The total number of slow apply requests (likely overloaded from slow disk).");
  std::unique_ptr<metrics::SourceHandle> source;

  ApplyMetrics() {
    for (auto& by_success : seconds) {
      for (auto& h : by_success) h = std::make_unique<metrics::FastHistogram>(metrics::exponential_buckets(0.0001, 2, 20));
    }
    source = metrics::add_source([this](std::vector<prometheus::MetricFamily>* out) {
      auto f = metrics::family("etcd_server_apply_duration_seconds",
                               "The latency distributions of v2 apply called by backend.",
                               prometheus::MetricType::Histogram);
      for (int c = 0; c < kMaxCase; ++c) {
        for (int ok = 0; ok < 2; ++ok) {
          const auto& h = seconds[c][ok];
          if (h->count() == 0) continue;
          h->add_to(&f, {{"op", apply_op_name(static_cast<Command::RequestCase>(c))},
                         {"success", ok ? "true" : "false"},
                         {"version", "v3"}});
        }
      }
      if (!f.metric.empty()) out->push_back(std::move(f));
    });
  }
};

ApplyMetrics& apply_metrics() {
  static auto* m = new ApplyMetrics;  // never destroyed: applies may run until exit
  return *m;
}

}  // namespace

void register_apply_metrics() { apply_metrics(); }

void observe_apply(Command::RequestCase op, const Error& error, double seconds) {
  ApplyMetrics& m = apply_metrics();
  int c = static_cast<int>(op);
  if (c < 0 || c >= kMaxCase) c = 0;  // "unknown"
  bool ok = !error || error == errors::compacted();
  m.seconds[c][ok ? 1 : 0]->observe(seconds);
  if (seconds > kSlowApplySeconds) m.slow.Increment();
}

}  // namespace etcdq::apply
