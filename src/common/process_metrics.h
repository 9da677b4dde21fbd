// process_* as Go's process collector (client_golang's process_collector,
// which etcd exposes) reports them, read from /proc at each scrape:
// process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_virtual_memory_max_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds,
// process_network_receive_bytes_total and process_network_transmit_bytes_total
// (/proc/self/net/dev: the network namespace's interfaces, as Go's);
// and etcd's os_fd_used and os_fd_limit (the same counts as
// process_open_fds and process_max_fds, under etcd's own names).
// A file that cannot be read leaves its series out (as Go's does).
//
// Thread-safety: any thread.
#pragma once

#include <prometheus/metric_family.h>

#include <vector>

namespace etcdq::metrics {

void collect_process(std::vector<prometheus::MetricFamily>* out);

}  // namespace etcdq::metrics
