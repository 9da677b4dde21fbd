// The consensus layer's series, with etcd 3.4's names, types and help
// (etcd's server/etcdserver/metrics.go, server/storage/wal/metrics.go),
// registered in common/metrics.h's registry:
//
//   etcd_server_leader_changes_seen_total   counter: each time the leader this
//       member knows becomes a member other than the one it knew before
//       (the first leader counts, as in etcd)
//   etcd_server_proposals_failed_total      counter: this member's proposals
//       that ended without being applied (lost leadership, no leader in time,
//       a stop)
//   etcd_server_proposals_pending           gauge: this member's proposals
//       waiting to be applied, sampled every consensus tick (10 ms)
//   etcd_disk_wal_fsync_duration_seconds    histogram (etcd's buckets): the
//       Raft log is etcdq's WAL; each libraft append is timed from the
//       request until raft_uv reports it durable (its write is O_DSYNC or
//       followed by fdatasync), so it is the fsync's latency plus any wait
//       behind the append before it, never less than the fsync
//
// Process-wide (several nodes in one test process add up). Any thread.
#pragma once

#include "common/metrics.h"

namespace etcdq::raft {

struct RaftMetrics {
  prometheus::Counter& leader_changes;
  prometheus::Counter& proposals_failed;
  prometheus::Gauge& proposals_pending;
  prometheus::Histogram& wal_fsync_seconds;
};

RaftMetrics& raft_metrics();

}  // namespace etcdq::raft
