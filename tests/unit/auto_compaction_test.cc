// Auto-compaction follows etcd 3.4's schedules (member/auto_compaction.h;
// etcd's v3compactor/periodic.go and revision.go), driven here by a clock
// the test moves.
#include "member/auto_compaction.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace etcdq::member {
namespace {

constexpr int64_t kSec = 1000;
constexpr int64_t kHour = 3600 * kSec;

TEST(CompactionRetention, BareNumberIsHoursInPeriodicModeAndRevisionsInRevisionMode) {
  int64_t r = -1;
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kPeriodic, "1", &r));
  EXPECT_EQ(r, kHour);
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kPeriodic, "72", &r));
  EXPECT_EQ(r, 72 * kHour);
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kRevision, "1000", &r));
  EXPECT_EQ(r, 1000);
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kPeriodic, "0", &r));
  EXPECT_EQ(r, 0);
}

TEST(CompactionRetention, GoDurationsAreAcceptedIncludingSubHourOnes) {
  int64_t r = -1;
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kPeriodic, "30m", &r));
  EXPECT_EQ(r, 30 * 60 * kSec);
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kPeriodic, "1h30m", &r));
  EXPECT_EQ(r, 90 * 60 * kSec);
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kPeriodic, "2s", &r));
  EXPECT_EQ(r, 2 * kSec);
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kPeriodic, "1.5h", &r));
  EXPECT_EQ(r, 90 * 60 * kSec);
  // etcd reads a duration in revision mode too: that many nanoseconds.
  ASSERT_FALSE(parse_compaction_retention(CompactionMode::kRevision, "1s", &r));
  EXPECT_EQ(r, 1000000000);
}

TEST(CompactionRetention, NonsenseAndNegativeValuesAreRefusedWithEtcdsMessage) {
  int64_t r = 0;
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"abc", "time: invalid duration \"abc\""},
           {"-1", "time: missing unit in duration \"-1\""},  // Go's words, as etcd 3.6 says them
           {"-1h", "time: invalid duration \"-1h\""},
           {"", "time: invalid duration \"\""},
           {"h", "time: invalid duration \"h\""},
           {"1.5", "time: missing unit in duration \"1.5\""},
           {"10x", "time: unknown unit \"x\" in duration \"10x\""}}) {
    Error e = parse_compaction_retention(CompactionMode::kPeriodic, bad, &r);
    EXPECT_TRUE(e) << bad;
    EXPECT_EQ(e.message(), "error parsing CompactionRetention: " + why);
  }
}

// Runs a periodic schedule as AutoCompactor does, one tick at a time: the
// store's revision is `rev_at(now)`; returns (time, revision) of every
// compaction in [0, until].
template <typename RevAt, typename Leading>
std::vector<std::pair<int64_t, int64_t>> run_periodic(int64_t retention_ms, int64_t until_ms, RevAt rev_at,
                                                      Leading leading_at) {
  std::vector<std::pair<int64_t, int64_t>> out;
  PeriodicSchedule s(retention_ms, 0);
  s.record(rev_at(0));
  for (int64_t now = s.tick_ms(); now <= until_ms; now += s.tick_ms()) {
    if (int64_t rev = s.due(now, leading_at(now))) {
      out.emplace_back(now, rev);
      s.compacted(rev, now);
    }
    s.record(rev_at(now));
  }
  return out;
}

TEST(PeriodicSchedule, FirstCompactionAfterOneRetentionToTheRevisionOfThen_ThenEveryRetention) {
  // Ten revisions a second; revision 1 at the start.
  auto rev_at = [](int64_t now) { return 1 + now / 100; };
  auto always = [](int64_t) { return true; };
  auto got = run_periodic(10 * kSec, 35 * kSec, rev_at, always);
  // Checks every tenth of the retention; compacts at 10 s to the revision of
  // 0 s, then every 10 s to the oldest revision it keeps (eleven ticks back,
  // as etcd's window of retention/tick + 1 entries).
  std::vector<std::pair<int64_t, int64_t>> want = {{10 * kSec, 1}, {20 * kSec, rev_at(9 * kSec)},
                                                   {30 * kSec, rev_at(19 * kSec)}};
  EXPECT_EQ(got, want);
}

TEST(PeriodicSchedule, RetentionOverAnHourChecksEverySixMinutesAndCompactsHourly) {
  PeriodicSchedule s(2 * kHour, 0);
  EXPECT_EQ(s.tick_ms(), 6 * 60 * kSec);
  auto rev_at = [](int64_t now) { return 1 + now / kSec; };
  auto got = run_periodic(2 * kHour, 5 * kHour, rev_at, [](int64_t) { return true; });
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], std::make_pair(2 * kHour, int64_t{1}));
  EXPECT_EQ(got[1].first, 3 * kHour);
  EXPECT_EQ(got[2].first, 4 * kHour);
  EXPECT_EQ(got[3].first, 5 * kHour);
  // What is kept is still about two hours (the window of 21 six-minute ticks).
  EXPECT_EQ(got[1].second, rev_at(3 * kHour - 21 * 6 * 60 * kSec));
}

TEST(PeriodicSchedule, AFollowerRecordsButNeverCompacts_ANewLeaderCompactsAtOnceFromThatHistory) {
  auto rev_at = [](int64_t now) { return 1 + now / 100; };
  auto got = run_periodic(10 * kSec, 30 * kSec, rev_at, [](int64_t now) { return now >= 25 * kSec; });
  // Leading from 25 s: the first tick then compacts to the revision of 11
  // ticks earlier, recorded while following.
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::make_pair(25 * kSec, rev_at(14 * kSec)));
}

TEST(PeriodicSchedule, AnIdleStoreIsNotCompactedTwiceToTheSameRevision) {
  auto got = run_periodic(10 * kSec, 60 * kSec, [](int64_t) { return int64_t{7}; }, [](int64_t) { return true; });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::make_pair(10 * kSec, int64_t{7}));
}

TEST(PeriodicSchedule, AFailedCompactionIsRetriedAtTheNextTick) {
  PeriodicSchedule s(10 * kSec, 0);
  for (int64_t t = 0; t < 10 * kSec; t += kSec) {
    s.record(5);
    EXPECT_EQ(s.due(t + kSec, true), t + kSec >= 10 * kSec ? 5 : 0);
  }
  // Not compacted (the proposal failed): the next tick asks again.
  s.record(6);
  EXPECT_EQ(s.due(11 * kSec, true), 5);
  s.compacted(5, 11 * kSec);
  s.record(6);
  EXPECT_EQ(s.due(12 * kSec, true), 0);
}

TEST(RevisionSchedule, KeepsTheLastNRevisionsEveryFiveMinutes) {
  RevisionSchedule s(10);
  EXPECT_EQ(s.tick_ms(), 5 * 60 * kSec);
  EXPECT_EQ(s.due(5, true), 0);  // nothing to compact yet
  EXPECT_EQ(s.due(10, true), 0);
  EXPECT_EQ(s.due(100, false), 0);  // followers never compact
  EXPECT_EQ(s.due(100, true), 90);
  s.compacted(90);
  EXPECT_EQ(s.due(100, true), 0);  // already done
  EXPECT_EQ(s.due(101, true), 91);
}

// The thread: compacts only while leading, through the hook, and stops.
TEST(AutoCompactor, CompactsThroughTheHookOnlyWhileLeading) {
  std::atomic<int64_t> rev{1};
  std::mutex mu;
  std::vector<int64_t> compacted;
  AutoCompactor::Hooks hooks;
  hooks.current_revision = [&rev] { return rev.load(); };
  hooks.compact = [&](int64_t r, std::function<void(Error)> done) {
    {
      std::lock_guard<std::mutex> lock(mu);
      compacted.push_back(r);
    }
    done({});
  };
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return compacted.size();
  };
  AutoCompactor c(CompactionMode::kPeriodic, 200, hooks);  // ticks every 20 ms
  c.start();
  std::thread writer([&rev] {
    for (int i = 0; i < 100; ++i) {
      ++rev;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(count(), 0u) << "compacted while not leading";
  c.set_leading(true);
  for (int i = 0; i < 200 && count() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  writer.join();
  c.stop();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(compacted.empty());
  // The revision of about one retention (200 ms, 40 revisions) earlier.
  EXPECT_GT(compacted[0], 1);
  EXPECT_LT(compacted[0], rev.load());
}

}  // namespace
}  // namespace etcdq::member
