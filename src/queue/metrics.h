// Per-queue metrics for /metrics, as prometheus-cpp families
// (common/metrics.h renders them):
//
//   etcdq_queue_depth{queue}                 messages in the queue
//   etcdq_queue_in_flight{queue}             handed out, visibility timeout not over,
//                                            holder not known gone (HolderAlive)
//   etcdq_queue_produced_total{queue}
//   etcdq_queue_delivered_total{queue}       deliveries, first ones and again
//   etcdq_queue_redelivered_total{queue}
//   etcdq_queue_acked_total{queue}           removed by a Delete (or lease expiry)
//   etcdq_queue_dead_lettered_total{queue}
//   etcdq_queue_oldest_age_seconds{queue}    age of the oldest message queued
//
// The `queue` label is the queue's name through metrics::label_value: a
// name longer than 128 bytes appears as its first 64 bytes, "...#" and a
// 64-bit hash of the whole name, and bytes that are not UTF-8 as \xHH, so a
// scrape costs at most ~200 bytes a queue and a line whatever names
// clients choose.
//
// Counters are replicated state: every member reports the same numbers, and
// they survive restarts. Any thread.
#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "queue/book.h"

namespace etcdq::queue {

// Whether the consumer `instance` on member `member` is still there as far
// as this member knows (Scheduler::holder_alive). A message whose holder is
// gone is not in flight, though the book keeps it assigned until it is
// handed to another consumer or its visibility timeout ends.
using HolderAlive = std::function<bool(uint64_t member, uint64_t instance)>;

// Messages of `v` in flight at `now_ms` (Unix ms).
uint64_t in_flight(const QueueView& v, int64_t now_ms, const HolderAlive& alive);

// Appends the families above, one sample per queue. `now_ms`: Unix ms, for
// in-flight and oldest age.
void collect_metrics(const Book& book, int64_t now_ms, const HolderAlive& alive,
                     std::vector<prometheus::MetricFamily>* out);

}  // namespace etcdq::queue
