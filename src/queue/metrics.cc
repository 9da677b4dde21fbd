#include "queue/metrics.h"

#include "common/metrics.h"

namespace etcdq::queue {

uint64_t in_flight(const QueueView& v, int64_t now_ms, const HolderAlive& alive) {
  uint64_t n = 0;
  for (const auto& [idx, m] : v.handed_out) {
    if (m.member() != 0 && m.deadline_ms() > now_ms && alive(m.member(), m.instance())) ++n;
  }
  return n;
}

void collect_metrics(const Book& book, int64_t now_ms, const HolderAlive& alive,
                     std::vector<prometheus::MetricFamily>* out) {
  using prometheus::MetricType;
  struct Family {
    const char* name;
    MetricType type;
    const char* help;
  };
  static const Family kFamilies[] = {
      {"etcdq_queue_depth", MetricType::Gauge, "Messages in the queue."},
      {"etcdq_queue_in_flight", MetricType::Gauge,
       "Messages handed to a consumer whose visibility timeout is not over."},
      {"etcdq_queue_produced_total", MetricType::Counter, "Messages produced."},
      {"etcdq_queue_delivered_total", MetricType::Counter, "Deliveries to consumers, first ones and again."},
      {"etcdq_queue_redelivered_total", MetricType::Counter, "Deliveries of a message that was delivered before."},
      {"etcdq_queue_acked_total", MetricType::Counter, "Messages removed by a Delete (an ack) or lease expiry."},
      {"etcdq_queue_dead_lettered_total", MetricType::Counter, "Messages moved to the dead-letter queue."},
      {"etcdq_queue_oldest_age_seconds", MetricType::Gauge, "Age of the oldest message in the queue."},
  };
  std::vector<prometheus::MetricFamily> fs;
  for (const auto& f : kFamilies) fs.push_back(metrics::family(f.name, f.help, f.type));
  for (const auto& name : book.queues()) {
    QueueView v;
    if (!book.view(name, &v)) continue;
    uint64_t flying = in_flight(v, now_ms, alive);
    int64_t oldest = book.oldest_produced_ms(name);
    double age = oldest > 0 && now_ms > oldest ? (now_ms - oldest) / 1000.0 : 0.0;
    const auto& c = v.counters;
    std::vector<prometheus::ClientMetric::Label> l{{"queue", metrics::label_value(name)}};
    const double values[] = {static_cast<double>(c.depth()),       static_cast<double>(flying),
                             static_cast<double>(c.produced()),    static_cast<double>(c.delivered()),
                             static_cast<double>(c.redelivered()), static_cast<double>(c.acked()),
                             static_cast<double>(c.dead_lettered()), age};
    for (size_t i = 0; i < fs.size(); ++i) metrics::add_sample(&fs[i], values[i], l);
  }
  for (auto& f : fs) out->push_back(std::move(f));
}

}  // namespace etcdq::queue
