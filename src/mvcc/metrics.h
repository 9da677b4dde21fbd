// The MVCC layer's counters, with etcd's names, types and help
// (etcd's server/storage/mvcc/metrics.go and metrics_txn.go), registered in
// common/metrics.h's registry; "seen by this member", so every member
// counts what it applies and what it serves:
//
//   etcd_mvcc_put_total      each put applied (a Put, or a put inside a Txn)
//   etcd_mvcc_delete_total   each delete-range applied (however many keys it removes)
//   etcd_mvcc_range_total    each range served or run inside a write (mvcc::range)
//   etcd_mvcc_txn_total      each mvcc txn of more than one range, put or
//                            delete, as etcd 3.6's metricsTxnWrite counts one:
//                            a Txn that writes is two (its compares, each a
//                            range, then its ops, nested ones included), a
//                            read-only Txn one (apply/kv.cc)
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
