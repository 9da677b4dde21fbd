// The member's Prometheus metrics, for /metrics (http/server.h), through
// prometheus-cpp's core library (Debian's prometheus-cpp-dev): one
// prometheus::Registry for the process that every layer registers its
// families into (a counter kept where its cause happens: storage/ for
// commit durations, consensus/ for proposals, mvcc/ for puts, server/ for gRPC
// calls), plus Sources that build families from live state at each scrape
// (leadership, key counts, queues, process_*). scrape() renders both with
// prometheus-cpp's TextSerializer: nothing here writes the text format.
//
// Names, types, labels and help texts are etcd 3.4's (etcd's
// server/etcdserver/metrics.go, server/storage/{mvcc,wal,backend}/metrics.go,
// go-grpc-prometheus); where etcdq measures something differently the
// registering header says how.
//
// Thread-safety: everything here may be called from any thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace etcdq::metrics {

// The process's registry. Families registered here live as long as the
// process (their counters are process-wide, as etcd's are).
prometheus::Registry& registry();

// Shorthands for a family with no labels, registered once: the returned
// metric lives as long as the process.
prometheus::Counter& counter(const std::string& name, const std::string& help);
prometheus::Gauge& gauge(const std::string& name, const std::string& help);
prometheus::Histogram& histogram(const std::string& name, const std::string& help,
                                 const std::vector<double>& buckets);

// etcd's disk latency buckets (wal and backend): 0.001 s doubling up to
// 8.192 s (prometheus.ExponentialBuckets(0.001, 2, 14)).
std::vector<double> disk_seconds_buckets();
// Go's prometheus.ExponentialBuckets(start, factor, count), which etcd's
// histograms use: start, start*factor, ... (count bounds; +Inf is implied).
std::vector<double> exponential_buckets(double start, double factor, int count);

// Seconds since `start` on the steady clock, for a histogram in seconds.
double seconds_since(std::chrono::steady_clock::time_point start);

// A histogram for the request path: observe() is a few relaxed atomic
// adds, no lock (prometheus-cpp's Histogram takes a mutex on each Observe).
// It is rendered by a Source (add_to), so a labelled set of them shows
// only the label values that were observed, as a Go HistogramVec does.
// Bounds are fixed at construction. Counts and sum may be read mid-update
// (a scrape can see a count without its sum), as with any counter pair.
class FastHistogram {
 public:
  explicit FastHistogram(std::vector<double> bounds);
  void observe(double v);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // Appends one sample (labels plus buckets, sum and count) to `f`, whose
  // type must be Histogram.
  void add_to(prometheus::MetricFamily* f, std::vector<prometheus::ClientMetric::Label> labels) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, the last +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Families built at scrape time from state owned elsewhere. A Source is
// called on the scraping thread, must not block for long, and appends its
// families to `out`. The returned handle unregisters it when destroyed
// (before what the function reads goes away).
using Source = std::function<void(std::vector<prometheus::MetricFamily>* out)>;
class SourceHandle {
 public:
  explicit SourceHandle(uint64_t id) : id_(id) {}
  ~SourceHandle();
  SourceHandle(const SourceHandle&) = delete;
  SourceHandle& operator=(const SourceHandle&) = delete;

 private:
  uint64_t id_;
};
std::unique_ptr<SourceHandle> add_source(Source fn);

// Helpers for Sources.
prometheus::MetricFamily family(const std::string& name, const std::string& help, prometheus::MetricType type);
void add_sample(prometheus::MetricFamily* f, double value, std::vector<prometheus::ClientMetric::Label> labels = {});

// The whole exposition: the registry's families, then every Source's, in
// Prometheus' text format 0.0.4.
std::string scrape();

// A label value made from bytes a client chose (a queue name): valid
// UTF-8 (a byte that is not becomes the text \xHH) and at most
// kMaxLabelValueBytes long, so that one 1 MiB name cannot make a scrape
// megabytes long. A longer value becomes its first kLabelPrefixBytes (cut
// at a character boundary), "...#" and the 16 hex digits of the FNV-1a
// 64-bit hash of all its bytes: still recognizable, distinct from other
// long values but for a 2^-64 chance, and the same on every member and
// every scrape. Prometheus' escaping (\\, \", \n) is the serializer's.
constexpr size_t kMaxLabelValueBytes = 128;
constexpr size_t kLabelPrefixBytes = 64;
std::string label_value(std::string_view bytes);

}  // namespace etcdq::metrics
