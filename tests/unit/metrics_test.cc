// common/metrics.h: bounded label values and the scrape through
// prometheus-cpp's serializer.
#include "common/metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace etcdq::metrics {
namespace {

TEST(MetricsLabelValue, ShortUtf8IsKeptAsIs) {
  EXPECT_EQ(label_value("orders"), "orders");
  EXPECT_EQ(label_value("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(label_value(std::string(kMaxLabelValueBytes, 'x')), std::string(kMaxLabelValueBytes, 'x'));
}

TEST(MetricsLabelValue, InvalidBytesBecomeHexText) {
  EXPECT_EQ(label_value(std::string("a\xff" "b", 3)), "a\\xffb");
  EXPECT_EQ(label_value(std::string("\xc3", 1)), "\\xc3");  // a cut sequence
}

TEST(MetricsLabelValue, LongValuesBecomePrefixAndHash) {
  std::string mib(1 << 20, 'q');
  std::string a = label_value(mib);
  EXPECT_LE(a.size(), kMaxLabelValueBytes);
  EXPECT_EQ(a.substr(0, kLabelPrefixBytes), std::string(kLabelPrefixBytes, 'q'));
  EXPECT_EQ(a.substr(kLabelPrefixBytes, 4), "...#");
  EXPECT_EQ(a.size(), kLabelPrefixBytes + 4 + 16);
  // Stable, and different for a value that differs only at its end.
  EXPECT_EQ(label_value(mib), a);
  std::string other = mib;
  other.back() = 'r';
  EXPECT_NE(label_value(other), a);
  // One byte over the bound is cut too.
  EXPECT_EQ(label_value(std::string(kMaxLabelValueBytes + 1, 'x')).size(), kLabelPrefixBytes + 20);
}

TEST(MetricsLabelValue, PrefixIsCutAtACharacterBoundary) {
  std::string s;
  while (s.size() < 300) s += "\xc3\xa9";  // two bytes a character
  std::string v = label_value(s);
  std::string prefix = v.substr(0, v.find("...#"));
  EXPECT_EQ(prefix.size() % 2, 0u);
  EXPECT_LE(prefix.size(), kLabelPrefixBytes);
}

TEST(MetricsScrape, RendersRegistryAndSources) {
  counter("etcdq_test_things_total", "Things.").Increment(3);
  auto handle = add_source([](std::vector<prometheus::MetricFamily>* out) {
    auto f = family("etcdq_test_live", "Live.", prometheus::MetricType::Gauge);
    add_sample(&f, 7, {{"queue", label_value(std::string(1000, 'z'))}});
    out->push_back(std::move(f));
  });
  std::string text = scrape();
  EXPECT_NE(text.find("# TYPE etcdq_test_things_total counter\netcdq_test_things_total 3\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE etcdq_test_live gauge\n"), std::string::npos);
  EXPECT_NE(text.find("etcdq_test_live{queue=\"" + std::string(kLabelPrefixBytes, 'z') + "...#"), std::string::npos);
  EXPECT_NE(text.find("process_open_fds "), std::string::npos);
  handle.reset();
  EXPECT_EQ(scrape().find("etcdq_test_live"), std::string::npos);
}

TEST(FastHistogram, BucketsAreInclusiveUpperBoundsRenderedCumulativeWithInf) {
  FastHistogram h(exponential_buckets(0.001, 2, 3));  // 0.001, 0.002, 0.004
  h.observe(0.001);  // on a bound: that bucket (Prometheus' le is <=)
  h.observe(0.0015);
  h.observe(0.004);
  h.observe(5);      // past every bound: +Inf only
  EXPECT_EQ(h.count(), 4u);
  auto handle = add_source([&h](std::vector<prometheus::MetricFamily>* out) {
    auto f = family("etcdq_test_seconds", "Seconds.", prometheus::MetricType::Histogram);
    h.add_to(&f, {{"op", "Put"}});
    out->push_back(std::move(f));
  });
  std::string text = scrape();
  EXPECT_NE(text.find("# TYPE etcdq_test_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("etcdq_test_seconds_bucket{op=\"Put\",le=\"0.001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("etcdq_test_seconds_bucket{op=\"Put\",le=\"0.002\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("etcdq_test_seconds_bucket{op=\"Put\",le=\"0.004\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("etcdq_test_seconds_bucket{op=\"Put\",le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("etcdq_test_seconds_count{op=\"Put\"} 4\n"), std::string::npos) << text;
  const std::string sum_prefix = "etcdq_test_seconds_sum{op=\"Put\"} ";
  size_t at = text.find(sum_prefix);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_NEAR(std::stod(text.substr(at + sum_prefix.size())), 5.0065, 1e-9);
}

TEST(ExponentialBuckets, AreGosExponentialBuckets) {
  EXPECT_EQ(exponential_buckets(0.0001, 2, 3), (std::vector<double>{0.0001, 0.0002, 0.0004}));
  EXPECT_EQ(exponential_buckets(1, 2, 24).back(), 8388608);
  EXPECT_EQ(disk_seconds_buckets().size(), 14u);
}

}  // namespace
}  // namespace etcdq::metrics
