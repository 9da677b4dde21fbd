// The MVCC layer's counters, with etcd 3.4's names, types and help
// (etcd's server/storage/mvcc/metrics.go and metrics_txn.go), registered in
// common/metrics.h's registry; "seen by this member", so every member
// counts what it applies and what it serves:
//
//   etcd_mvcc_put_total      each put applied (a Put, or a put inside a Txn)
//   etcd_mvcc_delete_total   each delete-range applied (however many keys it removes)
//   etcd_mvcc_range_total    each range served or run inside a write (mvcc::range)
//   etcd_mvcc_txn_total      each Txn applied with more than one operation,
//                            its compares counting as one range each (as etcd's
//                            metricsTxnWrite counts a txn)
//
// The gauges (etcd_debugging_mvcc_keys_total, the watcher counts) are read
// from Store and WatchHub at scrape time (member/metrics.h). Any thread.
#pragma once

#include "common/metrics.h"

namespace etcdq::mvcc {

struct MvccMetrics {
  prometheus::Counter& put;
  prometheus::Counter& del;
  prometheus::Counter& range;
  prometheus::Counter& txn;
};

MvccMetrics& mvcc_metrics();

}  // namespace etcdq::mvcc
