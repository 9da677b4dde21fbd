#include "common/metrics.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>

#include "common/process_metrics.h"

namespace etcdq::metrics {
namespace {

struct Sources {
  std::mutex mu;
  uint64_t next = 1;
  std::map<uint64_t, Source> fns;
};

Sources& sources() {
  static auto* s = new Sources;  // never destroyed: handles may outlive main's statics
  return *s;
}

// Number of bytes of the valid UTF-8 sequence at s[i], 0 if there is none.
size_t utf8_len(std::string_view s, size_t i) {
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

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

prometheus::Registry& registry() {
  static auto* r = new prometheus::Registry;  // never destroyed: metrics are used until exit
  return *r;
}

prometheus::Counter& counter(const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry()).Add({});
}

prometheus::Gauge& gauge(const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry()).Add({});
}

prometheus::Histogram& histogram(const std::string& name, const std::string& help,
                                 const std::vector<double>& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry()).Add({}, buckets);
}

std::vector<double> disk_seconds_buckets() { return exponential_buckets(0.001, 2, 14); }

std::vector<double> exponential_buckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

FastHistogram::FastHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void FastHistogram::observe(double v) {
  // Prometheus' buckets are upper bounds, inclusive: the first bound >= v.
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void FastHistogram::add_to(prometheus::MetricFamily* f, std::vector<prometheus::ClientMetric::Label> labels) const {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    prometheus::ClientMetric::Bucket b;
    b.cumulative_count = cumulative;
    b.upper_bound = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back(b);
  }
  // The count is the buckets' total, so that +Inf and _count agree in one scrape.
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = sum_.load(std::memory_order_relaxed);
  f->metric.push_back(std::move(m));
}

SourceHandle::~SourceHandle() {
  std::lock_guard lock(sources().mu);
  sources().fns.erase(id_);
}

std::unique_ptr<SourceHandle> add_source(Source fn) {
  std::lock_guard lock(sources().mu);
  uint64_t id = sources().next++;
  sources().fns.emplace(id, std::move(fn));
  return std::make_unique<SourceHandle>(id);
}

prometheus::MetricFamily family(const std::string& name, const std::string& help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void add_sample(prometheus::MetricFamily* f, double value, std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  switch (f->type) {
    case prometheus::MetricType::Counter: m.counter.value = value; break;
    case prometheus::MetricType::Gauge: m.gauge.value = value; break;
    default: m.untyped.value = value; break;
  }
  f->metric.push_back(std::move(m));
}

std::string scrape() {
  std::vector<prometheus::MetricFamily> all = registry().Collect();
  {
    // Sources run under the lock, so a handle being destroyed waits for a
    // scrape that is reading through it.
    std::lock_guard lock(sources().mu);
    for (auto& [id, fn] : sources().fns) fn(&all);
  }
  collect_process(&all);
  return prometheus::TextSerializer().Serialize(all);
}

std::string label_value(std::string_view v) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  size_t prefix_end = 0;  // out's length at the last character boundary within kLabelPrefixBytes
  for (size_t i = 0; i < v.size() && out.size() <= kMaxLabelValueBytes;) {
    if (size_t n = utf8_len(v, i); n > 0) {
      out.append(v.substr(i, n));
      i += n;
    } else {
      unsigned char c = static_cast<unsigned char>(v[i++]);
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
    if (out.size() <= kLabelPrefixBytes) prefix_end = out.size();
  }
  if (out.size() <= kMaxLabelValueBytes) return out;
  char h[17];
  std::snprintf(h, sizeof(h), "%016llx", static_cast<unsigned long long>(fnv1a64(v)));
  out.resize(prefix_end);
  return out + "...#" + h;
}

}  // namespace etcdq::metrics
