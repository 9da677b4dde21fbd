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
//   etcd_disk_wal_write_bytes_total         gauge (etcd's type): the bytes of
//       each successful libraft append as raft_uv lays them in its segment
//       (entries, their headers and padding, the batch's checksums)
//   etcd_server_learner_promote_successes   counter: learners this member,
//       as leader, promoted to voters
//   etcd_server_snapshot_apply_in_progress_total  gauge, 1 while this member
//       installs another member's state (consensus/snapshot_install.h)
//   etcd_snap_db_save_total_duration_seconds  histogram (etcd's buckets): one
//       successful fetch of that state, from asking a member to the state
//       restored (etcd: receiving and saving the .snap.db file)
//   etcd_server_read_indexes_failed_total   counter: read indexes (the
//       leader's barrier, or a follower's request to the leader) that ended
//       in an error or timed out, once per batch of reads as etcd counts one
//       request (consensus/read_index.cc)
//   etcd_server_slow_read_indexes_total     counter: a follower's read index
//       asked again because the leader changed, or timed out
//
// and the peer network's (etcd's server/etcdserver/api/rafthttp/metrics.go),
// labelled with a member id in hex as etcd's types.ID prints it:
//
//   etcd_network_peer_received_bytes_total{From}  counter: libraft's bytes
//       from a member that passed the wire check (consensus/inbound.h)
//   etcd_network_peer_sent_failures_total{To}     counter: a connection to a
//       member that could not be made, so what libraft had to send was
//       dropped (etcd counts each dropped message; libraft drops the
//       messages of a failed connect and retries 100 ms later), or a
//       message dropped because too much to the member waits to be
//       written (consensus/io.h, UvIo::kMaxSendQueueBytes)
//   etcd_network_peer_round_trip_time_seconds{To} histogram (etcd's buckets,
//       0.1 ms to 3.3 s): member/peer_prober.h's probe of each member
//
//   etcd_network_active_peers{Local,Remote}        gauge: 1 while an accepted
//       libraft connection from the member is open (etcd: while a stream
//       with the member is up), 0 after
//   etcd_network_disconnected_peers_total{Local,Remote}  counter: the last
//       such connection closing (consensus/transport.cc)
//
// Not kept: etcd_network_peer_sent_bytes_total, as libraft writes to the
// socket itself (consensus/transport.h) and etcdq never sees the bytes.
//
// Label values are member ids that passed the sender filter (in this
// member's configuration) or ones libraft connects to: bounded by the
// configuration, not by what a remote party sends.
//
// Process-wide (several nodes in one test process add up). Any thread.
#pragma once

#include "common/metrics.h"

namespace etcdq::consensus {

struct RaftMetrics {
  prometheus::Counter& leader_changes;
  prometheus::Counter& proposals_failed;
  prometheus::Gauge& proposals_pending;
  prometheus::Histogram& wal_fsync_seconds;
  prometheus::Gauge& wal_write_bytes;
  prometheus::Counter& learner_promotions;
  prometheus::Counter& read_index_failed;
  prometheus::Counter& slow_read_index;
  prometheus::Gauge& snapshot_installing;
  prometheus::Histogram& snapshot_save_seconds;
};

RaftMetrics& raft_metrics();

prometheus::Counter& peer_received_bytes(uint64_t from);
prometheus::Counter& peer_sent_failures(uint64_t to);
prometheus::Histogram& peer_round_trip_seconds(uint64_t to);
prometheus::Gauge& peer_active(uint64_t local, uint64_t remote);

// etcd's snapshot receive series (rafthttp/metrics.go), labelled From: one
// fetch of another member's state from that member (snapshot_install.h).
struct SnapshotReceiveMetrics {
  prometheus::Counter& success;
  prometheus::Counter& failures;
  prometheus::Gauge& inflight;
  prometheus::Histogram& seconds;  // etcd's buckets, 0.1 s doubling to 51.2 s
};
SnapshotReceiveMetrics snapshot_receive_metrics(uint64_t from);
prometheus::Counter& peer_disconnected(uint64_t local, uint64_t remote);

}  // namespace etcdq::consensus
