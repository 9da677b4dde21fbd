#include "queue/metrics.h"

#include <fmt/format.h>

#include <vector>

namespace etcdq::queue {
namespace {

// Prometheus label values escape backslash, quote and newline.
std::string label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string metrics_text(const Book& book, int64_t now_ms) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
  };
  static const Family kFamilies[] = {
      {"etcdq_queue_depth", "gauge", "Messages in the queue."},
      {"etcdq_queue_in_flight", "gauge", "Messages handed to a consumer whose visibility timeout is not over."},
      {"etcdq_queue_produced_total", "counter", "Messages produced."},
      {"etcdq_queue_delivered_total", "counter", "Deliveries to consumers, first ones and again."},
      {"etcdq_queue_redelivered_total", "counter", "Deliveries of a message that was delivered before."},
      {"etcdq_queue_acked_total", "counter", "Messages removed by a Delete (an ack) or lease expiry."},
      {"etcdq_queue_dead_lettered_total", "counter", "Messages moved to the dead-letter queue."},
      {"etcdq_queue_oldest_age_seconds", "gauge", "Age of the oldest message in the queue."},
  };
  std::vector<std::string> lines[std::size(kFamilies)];
  for (const auto& name : book.queues()) {
    QueueView v;
    if (!book.view(name, &v)) continue;
    uint64_t in_flight = 0;
    for (const auto& [idx, m] : v.handed_out) {
      if (m.member() != 0 && m.deadline_ms() > now_ms) ++in_flight;
    }
    int64_t oldest = book.oldest_produced_ms(name);
    double age = oldest > 0 && now_ms > oldest ? (now_ms - oldest) / 1000.0 : 0.0;
    const auto& c = v.counters;
    std::string l = "{queue=\"" + label(name) + "\"} ";
    lines[0].push_back(l + std::to_string(c.depth()));
    lines[1].push_back(l + std::to_string(in_flight));
    lines[2].push_back(l + std::to_string(c.produced()));
    lines[3].push_back(l + std::to_string(c.delivered()));
    lines[4].push_back(l + std::to_string(c.redelivered()));
    lines[5].push_back(l + std::to_string(c.acked()));
    lines[6].push_back(l + std::to_string(c.dead_lettered()));
    lines[7].push_back(l + fmt::format("{:.3f}", age));
  }
  std::string out;
  for (size_t i = 0; i < std::size(kFamilies); ++i) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", kFamilies[i].name, kFamilies[i].help, kFamilies[i].name,
                       kFamilies[i].type);
    for (const auto& l : lines[i]) out += std::string(kFamilies[i].name) + l + "\n";
  }
  return out;
}

}  // namespace etcdq::queue
