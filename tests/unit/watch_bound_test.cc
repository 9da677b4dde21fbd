// The watch stream's send bound (server/watch_service.h, catch_up_room and
// takes): what a client that does not read can cost, and that catching up
// always gets through.
#include <gtest/gtest.h>

#include "server/watch_service.h"

using etcdq::server::WatchService;

namespace {

constexpr size_t kMax = WatchService::kMaxQueuedBytes;
constexpr size_t kMiB = 1 << 20;

TEST(WatchBound, AnEmptyStreamTakesAnyBatchAndLetsCatchUpReadTheWholeBound) {
  EXPECT_EQ(WatchService::catch_up_room(0, /*empty=*/true, 0), kMax);
  EXPECT_TRUE(WatchService::takes(0, true, 64 * kMiB, /*one_revision=*/false, 0));
}

TEST(WatchBound, CatchUpWaitsFromThreeQuartersOn) {
  EXPECT_EQ(WatchService::catch_up_room(kMax / 4 * 3, false, 0), kMax / 4);
  EXPECT_EQ(WatchService::catch_up_room(kMax / 4 * 3 + 1, false, 0), 0u);
  EXPECT_EQ(WatchService::catch_up_room(kMax + kMiB, false, 0), 0u);
}

TEST(WatchBound, SeveralRevisionsTakeOnlyTheRoomLeft) {
  EXPECT_TRUE(WatchService::takes(kMiB, false, kMax - kMiB, false, 0));
  EXPECT_FALSE(WatchService::takes(kMiB, false, kMax - kMiB + 1, false, 0));
  EXPECT_FALSE(WatchService::takes(kMax / 4 * 3 + 1, false, kMax, false, 0));
}

// Before: a revision bigger than the room was refused whenever anything was
// queued, and read again from storage after every write, for as long as
// other watchers kept the stream busy.
TEST(WatchBound, OneRevisionFitsWheneverCatchUpMayRead) {
  for (size_t held : {size_t{0}, kMiB, 2 * kMiB, kMax / 4 * 3}) {
    size_t room = WatchService::catch_up_room(held, false, 0);
    ASSERT_GT(room, 0u) << held;
    EXPECT_TRUE(WatchService::takes(held, false, room + 3 * kMiB, /*one_revision=*/true, 0)) << held;
  }
  // Past three quarters nothing is read for it, and a synced watcher's
  // revision that does not fit waits in storage: the stream holds at most
  // three quarters of the bound plus one revision.
  EXPECT_FALSE(WatchService::takes(kMax / 4 * 3 + 1, false, kMax, true, 0));
}

constexpr size_t kTotal = WatchService::kMaxTotalQueuedBytes;
constexpr size_t kHard = WatchService::kHardTotalQueuedBytes;
constexpr size_t kMerge = WatchService::kMergeBytes;

// Streams that never read each hold up to kMaxQueuedBytes; together they
// stop at the total: a stream that holds anything takes nothing past it.
TEST(WatchBound, PastTheTotalAStreamHoldingAnythingTakesNothing) {
  EXPECT_TRUE(WatchService::takes(kMiB, false, kMiB, false, kTotal - kMiB));
  EXPECT_FALSE(WatchService::takes(kMiB, false, kMiB, false, kTotal - kMiB + 1));
  EXPECT_FALSE(WatchService::takes(1, true, 100, true, kTotal));
  EXPECT_EQ(WatchService::catch_up_room(1, true, kTotal), 0u);
  EXPECT_EQ(WatchService::catch_up_room(kMiB, false, kTotal + kMiB), 0u);
}

// A reading stream is empty between writes: it keeps getting events, one
// batch at a time, whatever the streams that do not read hold.
TEST(WatchBound, PastTheTotalAStreamHoldingNothingTakesOneBatch) {
  EXPECT_TRUE(WatchService::takes(0, true, 3 * kMiB, true, kTotal));
  EXPECT_TRUE(WatchService::takes(0, true, 3 * kMiB, false, kHard - 1));
  EXPECT_EQ(WatchService::catch_up_room(0, true, kTotal), kMerge);
}

// Past the hard total only batches of kMergeBytes get through: a bigger
// revision waits in storage until the streams that hold memory drain.
TEST(WatchBound, PastTheHardTotalOnlySmallBatchesGetThrough) {
  EXPECT_TRUE(WatchService::takes(0, true, kMerge, true, kHard));
  EXPECT_FALSE(WatchService::takes(0, true, kMerge + 1, true, kHard));
  EXPECT_EQ(WatchService::catch_up_room(0, true, kHard + kMiB), kMerge);
}

// Under the total, catching up reads no more than what is left of it.
TEST(WatchBound, CatchUpReadsNoMoreThanWhatIsLeftOfTheTotal) {
  EXPECT_EQ(WatchService::catch_up_room(0, true, kTotal - kMiB), kMiB);
  EXPECT_EQ(WatchService::catch_up_room(0, true, 0), kMax);
}

}  // namespace
