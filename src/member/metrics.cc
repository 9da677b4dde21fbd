#include "member/metrics.h"

#include <fmt/format.h>

#include <chrono>

#include "member/maintenance.h"
#include "mvcc/watch_hub.h"

namespace etcdq::member {

std::unique_ptr<metrics::SourceHandle> add_member_metrics(const Context* ctx, const storage::Engine* engine) {
  maintenance::register_metrics();
  return metrics::add_source([ctx, engine](std::vector<prometheus::MetricFamily>* out) {
    using prometheus::MetricType;
    auto one = [out](const char* name, const char* help, MetricType type, double v,
                     std::vector<prometheus::ClientMetric::Label> labels = {}) {
      auto f = metrics::family(name, help, type);
      metrics::add_sample(&f, v, std::move(labels));
      out->push_back(std::move(f));
    };
    consensus::Progress pr = ctx->node->progress();
    one("etcd_server_has_leader", "Whether or not a leader exists. 1 is existence, 0 is not.", MetricType::Gauge,
        pr.leader_id != 0 ? 1 : 0);
    one("etcd_server_is_leader", "Whether or not this member is a leader. 1 if is, 0 otherwise.", MetricType::Gauge,
        pr.is_leader ? 1 : 0);
    one("etcd_server_is_learner", "Whether or not this member is a learner. 1 if is, 0 otherwise.",
        MetricType::Gauge, pr.is_learner ? 1 : 0);
    one("etcd_server_id", "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
        MetricType::Gauge, 1, {{"server_id", fmt::format("{:x}", ctx->self.id)}});
    one("etcd_server_proposals_committed_total", "The total number of consensus proposals committed.",
        MetricType::Gauge, static_cast<double>(pr.commit_index));
    one("etcd_server_proposals_applied_total", "The total number of consensus proposals applied.", MetricType::Gauge,
        static_cast<double>(pr.applied_index));
    one("etcd_server_quota_backend_bytes", "Current backend storage quota size in bytes.", MetricType::Gauge,
        ctx->limits.quota_bytes > 0 ? static_cast<double>(ctx->limits.quota_bytes) : 0);
    double size = static_cast<double>(engine->size_bytes());
    one("etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.", MetricType::Gauge, size);
    one("etcd_debugging_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.", MetricType::Gauge, size);
    one("etcd_mvcc_db_total_size_in_use_in_bytes",
        "Total size of the underlying database logically in use in bytes.", MetricType::Gauge,
        static_cast<double>(engine->in_use_bytes()));
    one("etcd_debugging_mvcc_keys_total", "Total number of keys.", MetricType::Gauge,
        static_cast<double>(ctx->store->keys()));
    std::shared_ptr<const mvcc::ReadView> view = ctx->store->view();
    one("etcd_debugging_mvcc_current_revision", "The current revision of store.", MetricType::Gauge,
        static_cast<double>(view->revision()));
    one("etcd_debugging_mvcc_compact_revision", "The revision of the last compaction in store.", MetricType::Gauge,
        static_cast<double>(view->compact_revision()));
    if (ctx->auth) {
      one("etcd_debugging_auth_revision", "The current revision of auth store.", MetricType::Gauge,
          static_cast<double>(ctx->auth->revision()));
    }
    // etcd's rafthttp counts a peer known from when the transport adds it
    // (this member's own id too): here, every member of the configuration.
    auto known = metrics::family("etcd_network_known_peers", "The current number of known peers.", MetricType::Gauge);
    std::string local = fmt::format("{:x}", ctx->self.id);
    for (const consensus::MemberState& m : ctx->node->members()) {
      metrics::add_sample(&known, 1, {{"Local", local}, {"Remote", fmt::format("{:x}", m.id)}});
    }
    out->push_back(std::move(known));
    const mvcc::WatchHub& hub = ctx->store->watch_hub();
    one("etcd_debugging_mvcc_watcher_total", "Total number of watchers.", MetricType::Gauge,
        static_cast<double>(hub.watchers()));
    one("etcd_debugging_mvcc_watch_stream_total", "Total number of watch streams.", MetricType::Gauge,
        static_cast<double>(hub.streams()));
    one("etcd_debugging_mvcc_slow_watcher_total", "Total number of unsynced slow watchers.", MetricType::Gauge,
        static_cast<double>(hub.slow_watchers()));
    if (ctx->plugins) {
      int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
      ctx->plugins->collect_metrics(now_ms, out);
    }
  });
}

}  // namespace etcdq::member
