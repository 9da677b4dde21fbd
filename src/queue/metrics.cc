#include "queue/metrics.h"

#include <fmt/format.h>

#include <vector>

namespace etcdq::queue {
namespace {

// Prometheus label values are UTF-8 and escape backslash, quote and
// newline. Queue names are bytes: a byte that is not part of valid UTF-8 is
// written as the text \xHH (its backslash escaped), so one odd name cannot
// make the whole scrape unparsable.
size_t utf8_len(std::string_view s, size_t i) {  // 0: not valid UTF-8 at i
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size() || (n == 2 && c < 0xc2) || c > 0xf4) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) >> 6) != 2) return 0;
  }
  // No overlong forms, no surrogates, nothing past U+10FFFF.
  if ((c == 0xe0 && b(i + 1) < 0xa0) || (c == 0xed && b(i + 1) >= 0xa0) || (c == 0xf0 && b(i + 1) < 0x90) ||
      (c == 0xf4 && b(i + 1) >= 0x90)) {
    return 0;
  }
  return n;
}

std::string label(std::string_view v) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t n = utf8_len(v, i);
    if (n == 0) {
      unsigned char c = static_cast<unsigned char>(v[i++]);
      out += "\\\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
      continue;
    }
    char c = v[i];
    if (n == 1 && (c == '\\' || c == '"')) out.push_back('\\');
    if (n == 1 && c == '\n') {
      out += "\\n";
      ++i;
      continue;
    }
    out.append(v.substr(i, n));
    i += n;
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
