#include "mvcc/metrics.h"

namespace etcdq::mvcc {

MvccMetrics& mvcc_metrics() {
  static MvccMetrics m{
      metrics::counter("etcd_mvcc_put_total", "Total number of puts seen by this member."),
      metrics::counter("etcd_mvcc_delete_total", "Total number of deletes seen by this member."),
      metrics::counter("etcd_mvcc_range_total", "Total number of ranges seen by this member."),
      metrics::counter("etcd_mvcc_txn_total", "Total number of txns seen by this member."),
      metrics::gauge("etcd_debugging_mvcc_total_put_size_in_bytes",
                     "The total size of put kv pairs seen by this member."),
      metrics::counter("etcd_debugging_mvcc_db_compaction_keys_total", "Total number of db keys compacted."),
      metrics::gauge("etcd_debugging_mvcc_db_compaction_last",
                     "The unix time of the last db compaction. Resets to 0 on start."),
      metrics::histogram("etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
                         "Bucketed histogram of db compaction pause duration.",
                         metrics::exponential_buckets(1, 2, 13)),
      metrics::histogram("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
                         "Bucketed histogram of db compaction total duration.",
                         metrics::exponential_buckets(100, 2, 14)),
      metrics::gauge("etcd_mvcc_db_open_read_transactions", "The number of currently open read transactions"),
      metrics::counter("etcd_debugging_mvcc_events_total", "Total number of events sent by this member."),
      metrics::gauge("etcd_debugging_mvcc_pending_events_total", "Total number of pending events to be sent."),
  };
  return m;
}

}  // namespace etcdq::mvcc
