#include "mvcc/metrics.h"

namespace etcdq::mvcc {

MvccMetrics& mvcc_metrics() {
  static MvccMetrics m{
      metrics::counter("etcd_mvcc_put_total", "Total number of puts seen by this member."),
      metrics::counter("etcd_mvcc_delete_total", "Total number of deletes seen by this member."),
      metrics::counter("etcd_mvcc_range_total", "Total number of ranges seen by this member."),
      metrics::counter("etcd_mvcc_txn_total", "Total number of txns seen by this member."),
  };
  return m;
}

}  // namespace etcdq::mvcc
