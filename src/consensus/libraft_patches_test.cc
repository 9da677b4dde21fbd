// The originals the libraft patches replace (consensus/libraft_patches.h), as
// the libraft this binary links has them: each still behaves as its patch
// assumes, so a libraft whose internals differ from 0.15.0's fails here
// (libraft.patches_fit checks the archive's objects; the patched behaviour
// is tested in tests/unit/consensus_probe_past_snapshot_test.cc and
// written_segments_test.cc; patches 7 and 8's here, on a leader's state
// built by hand, and end to end by tests/cluster/test_catchup.py).
#include "consensus/libraft_patches.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

extern "C" uint32_t __real_byteCrc32(const void* buf, size_t size, uint32_t init);
extern "C" uint32_t __wrap_byteCrc32(const void* buf, size_t size, uint32_t init);

namespace etcdq::consensus {
namespace {

// libraft 0.15's progress state "sending a snapshot" (its progress.h) and
// "probing", as patch 1 relies on them.
constexpr unsigned short kSnapshot = 2;
constexpr unsigned short kProbe = 0;

struct LeaderWithOneFollower {
  struct raft r {};
  struct raft_progress progress[1] {};
  LeaderWithOneFollower(raft_index match, raft_index snapshot_index) {
    r.state = RAFT_LEADER;
    r.leader_state.progress = progress;
    progress[0].state = kSnapshot;
    progress[0].match_index = match;
    progress[0].next_index = snapshot_index + 1;
    progress[0].snapshot_index = snapshot_index;
  }
};

TEST(LibraftPatches, OriginalProbeAfterASnapshotResumesAtTheSnapshotIndex) {
  // What patch 1 corrects: 0.15's progressToProbe leaves a follower that
  // has just got a snapshot at next index = snapshot index. A libraft that
  // fixed it (or keeps other states) makes the patch stale: this fails.
  LeaderWithOneFollower l(/*match=*/10, /*snapshot_index=*/100);
  __real_progressToProbe(&l.r, 0);
  EXPECT_EQ(l.progress[0].state, kProbe);
  EXPECT_EQ(l.progress[0].next_index, 100u);
  EXPECT_EQ(l.progress[0].snapshot_index, 0u) << "the original clears the snapshot index";
}

// A leader (libraft's struct, as the progress functions read it) with one
// follower, id 7, and a clock the test sets (ms).
struct LeaderAtTime {
  struct raft r {};
  struct raft_io io {};
  struct raft_progress progress[1] {};
  struct raft_server server {};
  raft_time now = 1000;
  LeaderAtTime() {
    r.state = RAFT_LEADER;
    r.heartbeat_timeout = 100;
    r.election_timeout = 1000;
    io.data = this;
    io.time = [](struct raft_io* i) { return static_cast<LeaderAtTime*>(i->data)->now; };
    r.io = &io;
    server.id = 7;
    r.configuration.servers = &server;
    r.configuration.n = 1;
    r.leader_state.progress = progress;
    progress[0].state = kProbe;
    progress[0].next_index = 1;
    forget_snapshots_sent(&r);
    forget_answers(&r);
  }
  // The leader's log is its snapshot at `index` (of `term`) only.
  void log_is_snapshot(raft_index index, raft_term term) {
    r.log.snapshot.last_index = index;
    r.log.snapshot.last_term = term;
    r.log.offset = index;
  }
  ~LeaderAtTime() {
    forget_snapshots_sent(&r);
    forget_answers(&r);
  }
};

TEST(LibraftPatches, OriginalSnapshotStateIgnoresAHeartbeatRejection) {
  // What patch 7 corrects: in snapshot state 0.15 ignores every rejection
  // but one of the snapshot's index, so a dropped snapshot waits for the
  // install-snapshot timeout.
  LeaderWithOneFollower l(/*match=*/10, /*snapshot_index=*/100);
  EXPECT_FALSE(__real_progressMaybeDecrement(&l.r, 0, /*rejected=*/120, /*last_index=*/10));
  EXPECT_EQ(l.progress[0].state, kSnapshot);
}

TEST(LibraftPatches, OriginalProbeStepsBackOneIndexARejection) {
  // What patch 7's term walk shortens: the next probe is one index back.
  LeaderWithOneFollower l(/*match=*/10, /*snapshot_index=*/100);
  l.progress[0].state = kProbe;
  l.progress[0].next_index = 51;
  EXPECT_TRUE(__real_progressMaybeDecrement(&l.r, 0, /*rejected=*/50, /*last_index=*/80));
  EXPECT_EQ(l.progress[0].next_index, 50u);
}

TEST(LibraftPatches, OriginalProbeResendsEveryHeartbeatWithoutAnAnswer) {
  // What patch 8 corrects: a probed follower is sent its entries again once
  // a heartbeat passed, answered or not.
  LeaderAtTime l;
  l.progress[0].last_send = 1000;
  l.now = 1100;
  EXPECT_TRUE(__real_progressShouldReplicate(&l.r, 0));
}

TEST(LibraftPatches, ProbeWaitsForTheAnswerUpToHalfAnElection) {
  LeaderAtTime l;
  l.progress[0].last_send = 1000;
  l.now = 1100;
  EXPECT_FALSE(__wrap_progressShouldReplicate(&l.r, 0)) << "no answer since the last send";
  l.now = 1500;
  EXPECT_TRUE(__wrap_progressShouldReplicate(&l.r, 0)) << "half an election timeout passed";
  l.now = 1050;
  __wrap_progressMarkRecentRecv(&l.r, 0);
  l.now = 1100;
  EXPECT_TRUE(__wrap_progressShouldReplicate(&l.r, 0)) << "answered: a heartbeat later, as libraft";
}

TEST(LibraftPatches, ProbeDoesNotWaitForAnAnswerToAFailedSend) {
  // A send that failed goes back to probing (replication.c,
  // sendAppendEntriesCb): a member that is down is probed each heartbeat,
  // so one that restarts is found at once.
  LeaderAtTime l;
  l.progress[0].last_send = 1000;
  l.now = 1100;
  ASSERT_FALSE(__wrap_progressShouldReplicate(&l.r, 0));
  __wrap_progressToProbe(&l.r, 0);
  EXPECT_TRUE(__wrap_progressShouldReplicate(&l.r, 0));
}

TEST(LibraftPatches, DroppedSnapshotIsSentAgainOnALaterHeartbeatsRejection) {
  LeaderAtTime l;
  l.log_is_snapshot(100, 2);
  __wrap_progressToSnapshot(&l.r, 0);
  ASSERT_EQ(l.progress[0].state, kSnapshot);
  ASSERT_EQ(l.progress[0].snapshot_index, 100u);
  snapshot_on_wire(&l.io, 7);  // libraft read it and sent it
  // An answer to a heartbeat sent before the snapshot (its index is not past
  // the leader's last index then): the snapshot may still be on its way.
  EXPECT_FALSE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/100 - 1, /*last_index=*/10));
  EXPECT_EQ(l.progress[0].state, kSnapshot);
  // A follower that installed it answers with the snapshot's index as its last.
  EXPECT_FALSE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/150, /*last_index=*/100));
  EXPECT_EQ(l.progress[0].state, kSnapshot);
  // One that dropped it answers a later heartbeat with its old log: probe
  // again, which sends the snapshot now.
  EXPECT_TRUE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/150, /*last_index=*/10));
  EXPECT_EQ(l.progress[0].state, kProbe);
  auto sent = snapshots_sent(&l.r);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].id, 7u);
  EXPECT_EQ(sent[0].index, 100u);
}

TEST(LibraftPatches, AFollowerStoringTheSnapshotIsNotSentAnother) {
  // libraft 0.15's follower answers heartbeats with last index 0 while it
  // stores a snapshot: taken as dropped, the leader sent its next snapshot,
  // installed right after the first (issue #36).
  LeaderAtTime l;
  l.log_is_snapshot(100, 2);
  __wrap_progressToSnapshot(&l.r, 0);
  snapshot_on_wire(&l.io, 7);
  l.now = 1200;
  EXPECT_FALSE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/150, /*last_index=*/0));
  EXPECT_EQ(l.progress[0].state, kSnapshot);
  // Still 0 an election timeout after the send (a new member restarted
  // with no log): dropped after all, sent again.
  l.now = 1000 + l.r.election_timeout;
  EXPECT_TRUE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/150, /*last_index=*/0));
  EXPECT_EQ(l.progress[0].state, kProbe);
}

TEST(LibraftPatches, AnswersToAppendsSentBeforeTheSnapshotWentOutDoNotSendItAgain) {
  // libraft reads the snapshot (asynchronously) between progressToSnapshot
  // and the InstallSnapshot's send; the leader goes on appending meanwhile,
  // and the follower answers those appends with its old log before the
  // snapshot reaches it. Taken as dropped, the same or a newer snapshot
  // went out again and was installed right after the first (issue #36:
  // 6 ms between the send and that answer in a leader's log).
  LeaderAtTime l;
  l.log_is_snapshot(100, 2);
  __wrap_progressToSnapshot(&l.r, 0);
  // The leader's last index moves on (here through a newer snapshot of
  // its own: raft_last_index is the snapshot's while the log is empty).
  l.log_is_snapshot(160, 2);
  l.now = 1006;
  EXPECT_FALSE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/150, /*last_index=*/10));
  EXPECT_EQ(l.progress[0].state, kSnapshot);
  // Not even an election timeout later, while it has not gone out (libraft's
  // own install-snapshot timeout covers a snapshot that never does).
  l.now = 1000 + l.r.election_timeout + 1;
  EXPECT_FALSE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/155, /*last_index=*/10));
  EXPECT_EQ(l.progress[0].state, kSnapshot);
  // It goes out with the leader's log at 160: an answer to an append sent
  // before that still does not count, one sent after does.
  snapshot_on_wire(&l.io, 7);
  EXPECT_FALSE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/160, /*last_index=*/10));
  EXPECT_EQ(l.progress[0].state, kSnapshot);
  EXPECT_TRUE(__wrap_progressMaybeDecrement(&l.r, 0, /*rejected=*/161, /*last_index=*/10));
  EXPECT_EQ(l.progress[0].state, kProbe);
}

TEST(LibraftPatches, ASnapshotBeingStoredKeepsTheLogAfterTheOneSent) {
  // The leader stores a snapshot at 180 (its trailing count, 20, set when
  // it was taken) while it sends its last stored one, at 100: once 180 is
  // stored, libraft must keep the entries from 100 on, or the follower is
  // sent 180 right after installing 100.
  LeaderAtTime l;
  l.log_is_snapshot(100, 2);
  l.r.snapshot.pending.term = 2;
  l.r.snapshot.pending.index = 180;
  l.r.snapshot.trailing = 20;
  __wrap_progressToSnapshot(&l.r, 0);
  EXPECT_EQ(l.progress[0].snapshot_index, 100u);
  EXPECT_EQ(l.r.snapshot.trailing, 81u);  // 100..180
  // Nothing being stored, or a count that already keeps it: unchanged.
  l.r.snapshot.trailing = 200;
  __wrap_progressToSnapshot(&l.r, 0);
  EXPECT_EQ(l.r.snapshot.trailing, 200u);
  l.r.snapshot.pending.term = 0;
  l.r.snapshot.trailing = 20;
  __wrap_progressToSnapshot(&l.r, 0);
  EXPECT_EQ(l.r.snapshot.trailing, 20u);
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "libraft_patches_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(LibraftPatches, OriginalCapabilityProbeTakesAWritableDirectory) {
  TempDir dir;
  char errmsg[RAFT_ERRMSG_BUF_SIZE] = {};
  size_t direct = 12345;
  bool async = true;
  // The original's signature and result as patch 3 assumes: 0 on a
  // directory it may write in, with both outputs set (to what the file
  // system offers: 0/false on tmpfs, a block size and true on ext4).
  ASSERT_EQ(__real_UvFsProbeCapabilities(dir.path().c_str(), &direct, &async, errmsg), 0) << errmsg;
  EXPECT_NE(direct, 12345u);
  // A directory that does not exist is refused with a message.
  EXPECT_NE(__real_UvFsProbeCapabilities((dir.path() + "/missing").c_str(), &direct, &async, errmsg), 0);
  EXPECT_NE(errmsg[0], '\0');
}

TEST(LibraftPatches, ChecksumIsLibraftsOwn) {
  // Patch 11 (libraft_crc.cc): every length from empty to past 64 KiB, at
  // every alignment a buffer can start at, from zero and from running
  // values, gives libraft's own byteCrc32 value; so do chained calls (a
  // batch's header and data are checksummed in pieces).
  std::mt19937 rng(38);
  std::vector<unsigned char> buf(70000 + 16);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  const uint32_t inits[] = {0, 0xffffffffu, 0x04c11db7u, 0x80000000u, 1};
  for (size_t len : {0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 255, 256, 257, 1023, 4096,
                     65535, 65536, 70000}) {
    for (size_t off = 0; off < 16; off++) {
      for (uint32_t init : inits) {
        ASSERT_EQ(__wrap_byteCrc32(buf.data() + off, len, init), __real_byteCrc32(buf.data() + off, len, init))
            << "length " << len << ", offset " << off << ", init " << init;
      }
    }
  }
  for (int i = 0; i < 2000; i++) {
    size_t off = rng() % 16, len = rng() % 3000;
    uint32_t init = static_cast<uint32_t>(rng());
    size_t cut = len ? rng() % len : 0;
    uint32_t whole = __real_byteCrc32(buf.data() + off, len, init);
    ASSERT_EQ(__wrap_byteCrc32(buf.data() + off, len, init), whole);
    uint32_t first = __wrap_byteCrc32(buf.data() + off, cut, init);
    ASSERT_EQ(__wrap_byteCrc32(buf.data() + off + cut, len - cut, first), whole);
  }
  EXPECT_EQ(__wrap_byteCrc32(nullptr, 0, 0x1234u), 0x1234u);
}

}  // namespace
}  // namespace etcdq::consensus
