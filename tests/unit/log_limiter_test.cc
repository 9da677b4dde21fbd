#include "common/log_limiter.h"

#include <gtest/gtest.h>

namespace etcdq {
namespace {

using std::chrono::seconds;

TEST(LogLimiterTest, AllowsABurstPerWindowAndCountsTheRest) {
  LogLimiter l(3, seconds(10));
  auto t0 = LogLimiter::Clock::time_point{} + seconds(100);
  uint64_t s = 99;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(l.allow_at(t0 + seconds(i), &s));
    EXPECT_EQ(s, 0u);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(l.allow_at(t0 + seconds(5), &s));
  // A new window: the first line allowed says how many were left out.
  ASSERT_TRUE(l.allow_at(t0 + seconds(10), &s));
  EXPECT_EQ(s, 5u);
  ASSERT_TRUE(l.allow_at(t0 + seconds(11), &s));
  EXPECT_EQ(s, 0u);
}

TEST(LogLimiterTest, OneLinePerWindow) {
  LogLimiter l(1, seconds(10));
  auto t0 = LogLimiter::Clock::time_point{} + seconds(100);
  uint64_t s = 0;
  EXPECT_TRUE(l.allow_at(t0, &s));
  EXPECT_FALSE(l.allow_at(t0 + seconds(9), &s));
  EXPECT_FALSE(l.allow_at(t0 + seconds(9), &s));
  EXPECT_TRUE(l.allow_at(t0 + seconds(19), &s));
  EXPECT_EQ(s, 2u);
}

}  // namespace
}  // namespace etcdq
