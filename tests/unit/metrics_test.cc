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

}  // namespace
}  // namespace etcdq::metrics
