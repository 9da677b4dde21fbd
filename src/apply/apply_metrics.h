// How long each command took to apply, as etcd's uberApplier.dispatch
// times it (server/etcdserver/txn/metrics.go, apply/uber_applier.go):
//
//   etcd_server_apply_duration_seconds{version="v3",op,success}  histogram
//       (etcd's buckets, 0.1 ms doubling to 52.4 s): one command of a log
//       entry through the apply chain, up to its writes being batched (the
//       entry's RocksDB commit is timed in
//       etcd_disk_backend_commit_duration_seconds). op is etcd's name for
//       the request (Put, Txn, LeaseGrant, AuthUserAdd,
//       ClusterMemberAttrSet, ...; etcdq's queue assignment is
//       QueueAssign); success is false when the command failed with any
//       error but ErrCompacted, as etcd decides.
//   etcd_server_slow_apply_total  counter: commands that took longer than
//       etcd's default --warning-apply-duration, 100 ms (etcdq accepts the
//       flag but does not use it).
//
// Measured with common/metrics.h FastHistogram: no lock on the apply path.
// Thread-safety: any thread (the apply thread observes).
#pragma once

#include "common/error.h"
#include "etcdq/command.pb.h"

namespace etcdq::apply {

// Records one command that took `seconds` and ended with `error`.
void observe_apply(Command::RequestCase op, const Error& error, double seconds);

// Registers the families (the slow-apply counter at 0, as etcd shows it).
void register_apply_metrics();

}  // namespace etcdq::apply
