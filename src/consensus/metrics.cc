#include "consensus/metrics.h"

#include <fmt/format.h>

namespace etcdq::consensus {

RaftMetrics& raft_metrics() {
  static RaftMetrics m{
      metrics::counter("etcd_server_leader_changes_seen_total", "The number of leader changes seen."),
      metrics::counter("etcd_server_proposals_failed_total", "The total number of failed proposals seen."),
      metrics::gauge("etcd_server_proposals_pending", "The current number of pending proposals to commit."),
      metrics::histogram("etcd_disk_wal_fsync_duration_seconds", "The latency distributions of fsync called by WAL.",
                         metrics::disk_seconds_buckets()),
      metrics::gauge("etcd_disk_wal_write_bytes_total", "Total number of bytes written in WAL."),
      metrics::counter("etcd_server_learner_promote_successes",
                       "The total number of successful learner promotions while this member is leader."),
      metrics::counter("etcd_server_read_indexes_failed_total", "The total number of failed read indexes seen."),
      metrics::counter("etcd_server_slow_read_indexes_total",
                       "The total number of pending read indexes not in sync with leader's or timed out read index "
                       "requests."),
      metrics::gauge("etcd_server_snapshot_apply_in_progress_total",
                     "1 if the server is applying the incoming snapshot. 0 if none."),
      metrics::histogram("etcd_snap_db_save_total_duration_seconds",
                         "The total latency distributions of v3 snapshot save",
                         metrics::exponential_buckets(0.1, 2, 10))
  };
  return m;
}

namespace {

struct PeerFamilies {
  prometheus::Family<prometheus::Counter>& received = prometheus::BuildCounter()
                                                          .Name("etcd_network_peer_received_bytes_total")
                                                          .Help("The total number of bytes received from peers.")
                                                          .Register(metrics::registry());
  prometheus::Family<prometheus::Counter>& failures = prometheus::BuildCounter()
                                                          .Name("etcd_network_peer_sent_failures_total")
                                                          .Help("The total number of send failures from peers.")
                                                          .Register(metrics::registry());
  prometheus::Family<prometheus::Gauge>& active = prometheus::BuildGauge()
                                                     .Name("etcd_network_active_peers")
                                                     .Help("The current number of active peer connections.")
                                                     .Register(metrics::registry());
  prometheus::Family<prometheus::Counter>& disconnected = prometheus::BuildCounter()
                                                              .Name("etcd_network_disconnected_peers_total")
                                                              .Help("The total number of disconnected peers.")
                                                              .Register(metrics::registry());
  prometheus::Family<prometheus::Histogram>& rtt = prometheus::BuildHistogram()
                                                       .Name("etcd_network_peer_round_trip_time_seconds")
                                                       .Help("Round-Trip-Time histogram between peers")
                                                       .Register(metrics::registry());
};

PeerFamilies& peer_families() {
  static PeerFamilies* f = new PeerFamilies;
  return *f;
}

// Go's types.ID.String(): hex, no padding.
std::string id_label(uint64_t id) { return fmt::format("{:x}", id); }

}  // namespace

prometheus::Counter& peer_received_bytes(uint64_t from) {
  return peer_families().received.Add({{"From", id_label(from)}});
}

prometheus::Counter& peer_sent_failures(uint64_t to) { return peer_families().failures.Add({{"To", id_label(to)}}); }

prometheus::Histogram& peer_round_trip_seconds(uint64_t to) {
  // prometheus.ExponentialBuckets(0.0001, 2, 16), as etcd.
  static const prometheus::Histogram::BucketBoundaries buckets = [] {
    prometheus::Histogram::BucketBoundaries b;
    double v = 0.0001;
    for (int i = 0; i < 16; ++i, v *= 2) b.push_back(v);
    return b;
  }();
  return peer_families().rtt.Add({{"To", id_label(to)}}, buckets);
}

prometheus::Gauge& peer_active(uint64_t local, uint64_t remote) {
  return peer_families().active.Add({{"Local", id_label(local)}, {"Remote", id_label(remote)}});
}

prometheus::Counter& peer_disconnected(uint64_t local, uint64_t remote) {
  return peer_families().disconnected.Add({{"Local", id_label(local)}, {"Remote", id_label(remote)}});
}

namespace {

struct SnapshotReceiveFamilies {
  prometheus::Family<prometheus::Counter>& success = prometheus::BuildCounter()
                                                         .Name("etcd_network_snapshot_receive_success")
                                                         .Help("Total number of successful snapshot receives")
                                                         .Register(metrics::registry());
  prometheus::Family<prometheus::Counter>& failures = prometheus::BuildCounter()
                                                          .Name("etcd_network_snapshot_receive_failures")
                                                          .Help("Total number of snapshot receive failures")
                                                          .Register(metrics::registry());
  prometheus::Family<prometheus::Gauge>& inflight = prometheus::BuildGauge()
                                                        .Name("etcd_network_snapshot_receive_inflights_total")
                                                        .Help("Total number of inflight snapshot receives")
                                                        .Register(metrics::registry());
  prometheus::Family<prometheus::Histogram>& seconds =
      prometheus::BuildHistogram()
          .Name("etcd_network_snapshot_receive_total_duration_seconds")
          .Help("Total latency distributions of v3 snapshot receives")
          .Register(metrics::registry());
};

}  // namespace

SnapshotReceiveMetrics snapshot_receive_metrics(uint64_t from) {
  static auto* f = new SnapshotReceiveFamilies;  // never destroyed, as the registry
  prometheus::Labels l{{"From", id_label(from)}};
  return SnapshotReceiveMetrics{f->success.Add(l), f->failures.Add(l), f->inflight.Add(l),
                                f->seconds.Add(l, metrics::exponential_buckets(0.1, 2, 10))};
}

}  // namespace etcdq::consensus
