// Per-queue metrics in Prometheus' text format, for /metrics (http/):
//
//   etcdq_queue_depth{queue}                 messages in the queue
//   etcdq_queue_in_flight{queue}             handed out, visibility timeout not over
//   etcdq_queue_produced_total{queue}
//   etcdq_queue_delivered_total{queue}       deliveries, first ones and again
//   etcdq_queue_redelivered_total{queue}
//   etcdq_queue_acked_total{queue}           removed by a Delete (or lease expiry)
//   etcdq_queue_dead_lettered_total{queue}
//   etcdq_queue_oldest_age_seconds{queue}    age of the oldest message queued
//
// Counters are replicated state: every member reports the same numbers, and
// they survive restarts. Any thread.
#pragma once

#include <cstdint>
#include <string>

#include "queue/book.h"

namespace etcdq::queue {

// `now_ms`: Unix ms, for in-flight and oldest age.
std::string metrics_text(const Book& book, int64_t now_ms);

}  // namespace etcdq::queue
