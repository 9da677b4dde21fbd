#include "member/maintenance.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <utility>

#include "common/metrics.h"
#include "common/progress.h"
#include "etcd_snapshot/writer.h"
#include "member/cluster.h"
#include "member/fsm.h"
#include "mvcc/etcd_keys.h"

namespace etcdq::member::maintenance {
namespace {

// The member's tables a snapshot holds beside the view
// (etcd_snapshot/writer.h), read now.
etcd_snapshot::Tables snapshot_tables(const Context& ctx) {
  etcd_snapshot::Tables t;
  t.alarms = ctx.alarms->list(0, etcdserverpb::NONE);
  google::protobuf::RepeatedPtrField<etcdserverpb::Member> members;
  list_members(ctx, &members);
  t.members.assign(members.begin(), members.end());
  return t;
}

// etcd's histograms of these calls (server/storage/backend/metrics.go,
// server/storage/mvcc/metrics.go) and its defrag gauge, with its buckets.
struct MaintenanceMetrics {
  prometheus::Histogram& defrag_seconds = metrics::histogram(
      "etcd_disk_backend_defrag_duration_seconds", "The latency distribution of backend defragmentation.",
      metrics::exponential_buckets(0.1, 2, 13));
  prometheus::Gauge& defrag_inflight =
      metrics::gauge("etcd_disk_defrag_inflight",
                     "Whether or not defrag is active on the member. 1 means active, 0 means not.");
  prometheus::Histogram& snapshot_seconds =
      metrics::histogram("etcd_disk_backend_snapshot_duration_seconds",
                         "The latency distribution of backend snapshots.", metrics::exponential_buckets(0.01, 2, 17));
  prometheus::Histogram& hash_seconds =
      metrics::histogram("etcd_mvcc_hash_duration_seconds", "The latency distribution of storage hash operation.",
                         metrics::exponential_buckets(0.01, 2, 15));
  prometheus::Histogram& hash_rev_seconds = metrics::histogram(
      "etcd_mvcc_hash_rev_duration_seconds", "The latency distribution of storage hash by revision operation.",
      metrics::exponential_buckets(0.01, 2, 15));
};

MaintenanceMetrics& maintenance_metrics() {
  static auto* m = new MaintenanceMetrics;  // never destroyed, as the registry
  return *m;
}

}  // namespace

void register_metrics() { maintenance_metrics(); }

DbSize db_size(const Context& ctx) {
  DbSize s;
  s.bytes = ctx.store->engine()->size_bytes();
  s.in_use_bytes = ctx.store->engine()->in_use_bytes();
  return s;
}

std::vector<etcdserverpb::AlarmMember> alarms(const Context& ctx, uint64_t member_id, etcdserverpb::AlarmType type) {
  return ctx.alarms->list(member_id, type);
}

Error defragment(Context& ctx) {
  MaintenanceMetrics& m = maintenance_metrics();
  auto start = std::chrono::steady_clock::now();
  m.defrag_inflight.Increment();
  Error e = ctx.store->engine()->compact_all();
  m.defrag_inflight.Decrement();
  m.defrag_seconds.Observe(metrics::seconds_since(start));
  return e;
}

Error hash_kv(const Context& ctx, int64_t revision, KvHash* out) {
  auto view = ctx.store->view();
  uint32_t hash = 0;
  auto start = std::chrono::steady_clock::now();
  if (Error e = mvcc::etcd_hash_kv(*view, revision, &hash)) return e;
  maintenance_metrics().hash_rev_seconds.Observe(metrics::seconds_since(start));
  out->hash = hash;
  out->revision = view->revision();
  out->hash_revision = revision > 0 ? revision : view->revision();
  out->compact_revision = view->compact_revision();
  return {};
}

Error hash(const Context& ctx, uint32_t* out, int64_t* revision) {
  auto view = ctx.store->view();
  auto start = std::chrono::steady_clock::now();
  if (Error e = etcd_snapshot::etcd_hash(snapshot_tables(ctx), *view, out)) return e;
  maintenance_metrics().hash_seconds.Observe(metrics::seconds_since(start));
  *revision = view->revision();
  return {};
}

Error write_snapshot(const Context& ctx, const std::string& path) {
  auto view = ctx.store->view();
  const int64_t revision = view->revision();
  spdlog::info("building a database snapshot for a client at revision {}", revision);
  auto start = std::chrono::steady_clock::now();
  // Progress at most once a second (common/progress.h): the key bucket is
  // written in revision order, most of the file.
  common::ProgressPacer pacer;
  Error e = etcd_snapshot::write_etcd_snapshot(snapshot_tables(ctx), *view, path, [&](int64_t at, int64_t entries) {
    if (!pacer.due()) return;
    spdlog::info("building a database snapshot for a client: at revision {} of {}, {} key revisions written, {} ms",
                 at, revision, entries, pacer.elapsed_ms());
  });
  if (!e) maintenance_metrics().snapshot_seconds.Observe(metrics::seconds_since(start));
  return e;
}

std::string snapshot_dir(const Context& ctx) {
  return std::filesystem::path(ctx.store->engine()->dir()).parent_path().string();
}

Error read_state(const Context& ctx, uint64_t min_index, bool without_latest, const SnapshotVisitor& fn) {
  return stream_state(
      ctx.store->engine(), min_index,
      [&fn](storage::Cf cf, std::string_view key, std::string_view value) {
        return fn(static_cast<uint32_t>(cf), key, value);
      },
      without_latest ? StateParts::kAllButLatest : StateParts::kAll);
}

}  // namespace etcdq::member::maintenance
