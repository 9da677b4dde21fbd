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
//   etcd_debugging_mvcc_total_put_size_in_bytes  gauge (as etcd's): each
//                            put's key and value lengths, summed
//   etcd_debugging_mvcc_db_compaction_keys_total  versions removed by compaction
//   etcd_debugging_mvcc_db_compaction_last        Unix time a compaction last ended (0 from start)
//   etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds  each
//                            compaction batch (its sweep and write), whole ms
//   etcd_debugging_mvcc_db_compaction_total_duration_milliseconds  a whole
//                            compaction, whole ms (compactor.h)
//   etcd_debugging_mvcc_events_total     watch events written to clients
//   etcd_debugging_mvcc_pending_events_total  gauge: watch events queued in
//                            streams, not yet written (member/watches.h)
//   etcd_mvcc_db_open_read_transactions  gauge: ReadViews alive (each holds
//                            a RocksDB snapshot, as etcd's read txns hold bbolt's)
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
  prometheus::Gauge& put_size;
  prometheus::Counter& compaction_keys;
  prometheus::Gauge& compaction_last;
  prometheus::Histogram& compaction_pause_ms;
  prometheus::Histogram& compaction_total_ms;
  prometheus::Gauge& open_read_views;
  prometheus::Counter& events;
  prometheus::Gauge& pending_events;
};

MvccMetrics& mvcc_metrics();

}  // namespace etcdq::mvcc
