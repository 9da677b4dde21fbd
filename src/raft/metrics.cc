#include "raft/metrics.h"

namespace etcdq::raft {

RaftMetrics& raft_metrics() {
  static RaftMetrics m{
      metrics::counter("etcd_server_leader_changes_seen_total", "The number of leader changes seen."),
      metrics::counter("etcd_server_proposals_failed_total", "The total number of failed proposals seen."),
      metrics::gauge("etcd_server_proposals_pending", "The current number of pending proposals to commit."),
      metrics::histogram("etcd_disk_wal_fsync_duration_seconds", "The latency distributions of fsync called by WAL.",
                         metrics::disk_seconds_buckets()),
  };
  return m;
}

}  // namespace etcdq::raft
