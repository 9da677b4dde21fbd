// Where the leader resumes probing a follower it was sending a snapshot to
// (consensus/libraft_patches.h, patch 1). These call libraft's own progressToProbe by
// name, as libraft's replication code does: that the call lands on the
// wrapper proves the link's --wrap as much as the outcome.
#include <gtest/gtest.h>

#include "consensus/libraft_patches.h"

// libraft 0.15's internal entry point (progress.h), wrapped at link time.
extern "C" void progressToProbe(struct raft* r, unsigned i);

namespace {

// libraft 0.15's progress states (progress.h).
constexpr unsigned short kProbe = 0, kPipeline = 1, kSnapshot = 2;

struct Leader {
  struct raft r {};
  struct raft_progress progress[2]{};
  Leader() { r.leader_state.progress = progress; }
};

TEST(ConsensusProbePastSnapshot, FollowerLeavingTheSnapshotStateIsProbedFromPastTheSnapshot) {
  Leader l;
  l.progress[1] = {kSnapshot, 41, 40, 100, 0, 0, false};
  progressToProbe(&l.r, 1);
  // Not known to have it (a failed send, a follower that answered below
  // it): probed, past the snapshot.
  EXPECT_EQ(l.progress[1].state, kProbe);
  // libraft 0.15 alone gives 100: the previous index 99 is below a
  // follower that holds only the snapshot, which then rejects.
  EXPECT_EQ(l.progress[1].next_index, 101u);
  EXPECT_EQ(l.progress[1].snapshot_index, 0u);
}

TEST(ConsensusProbePastSnapshot, FollowerThatReportedMoreThanTheSnapshotIsSentToFromItsMatch) {
  Leader l;
  l.progress[1] = {kSnapshot, 151, 150, 100, 0, 0, false};
  progressToProbe(&l.r, 1);
  // It has the snapshot: pipeline at once (libraft 0.15 alone: probe, and
  // the entries wait for the next heartbeat tick).
  EXPECT_EQ(l.progress[1].state, kPipeline);
  EXPECT_EQ(l.progress[1].next_index, 151u);
}

TEST(ConsensusProbePastSnapshot, FollowerThatReportedTheSnapshotIsSentTheEntriesPastItAtOnce) {
  // What replicationUpdate does with a follower's answer that it installed
  // the snapshot at 100 (progressMaybeUpdate sets match 100, next 101).
  Leader l;
  l.progress[1] = {kSnapshot, 101, 100, 100, 0, 0, false};
  progressToProbe(&l.r, 1);
  EXPECT_EQ(l.progress[1].state, kPipeline);
  EXPECT_EQ(l.progress[1].next_index, 101u);
  EXPECT_EQ(l.progress[1].snapshot_index, 0u);
}

TEST(ConsensusProbePastSnapshot, FollowerOutsideTheSnapshotStateIsProbedFromItsMatchAsBefore) {
  Leader l;
  l.progress[0] = {kPipeline, 90, 70, 0, 0, 0, false};
  progressToProbe(&l.r, 0);
  EXPECT_EQ(l.progress[0].state, kProbe);
  EXPECT_EQ(l.progress[0].next_index, 71u);
}

}  // namespace
