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
  EXPECT_EQ(WatchService::catch_up_room(0, /*empty=*/true), kMax);
  EXPECT_TRUE(WatchService::takes(0, true, 64 * kMiB, /*one_revision=*/false));
}

TEST(WatchBound, CatchUpWaitsFromThreeQuartersOn) {
  EXPECT_EQ(WatchService::catch_up_room(kMax / 4 * 3, false), kMax / 4);
  EXPECT_EQ(WatchService::catch_up_room(kMax / 4 * 3 + 1, false), 0u);
  EXPECT_EQ(WatchService::catch_up_room(kMax + kMiB, false), 0u);
}

TEST(WatchBound, SeveralRevisionsTakeOnlyTheRoomLeft) {
  EXPECT_TRUE(WatchService::takes(kMiB, false, kMax - kMiB, false));
  EXPECT_FALSE(WatchService::takes(kMiB, false, kMax - kMiB + 1, false));
  EXPECT_FALSE(WatchService::takes(kMax / 4 * 3 + 1, false, kMax, false));
}

// Before: a revision bigger than the room was refused whenever anything was
// queued, and read again from storage after every write, for as long as
// other watchers kept the stream busy.
TEST(WatchBound, OneRevisionFitsWheneverCatchUpMayRead) {
  for (size_t held : {size_t{0}, kMiB, 2 * kMiB, kMax / 4 * 3}) {
    size_t room = WatchService::catch_up_room(held, false);
    ASSERT_GT(room, 0u) << held;
    EXPECT_TRUE(WatchService::takes(held, false, room + 3 * kMiB, /*one_revision=*/true)) << held;
  }
  // Past three quarters nothing is read for it, and a synced watcher's
  // revision that does not fit waits in storage: the stream holds at most
  // three quarters of the bound plus one revision.
  EXPECT_FALSE(WatchService::takes(kMax / 4 * 3 + 1, false, kMax, true));
}

}  // namespace
