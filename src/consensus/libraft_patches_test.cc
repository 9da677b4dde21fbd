// The originals the libraft patches replace (consensus/libraft_patches.h), as
// the libraft this binary links has them: each still behaves as its patch
// assumes, so a libraft whose internals differ from 0.15.0's fails here
// (libraft.patches_fit checks the archive's objects; the patched behaviour
// is tested in tests/unit/consensus_probe_past_snapshot_test.cc and
// written_segments_test.cc).
#include "consensus/libraft_patches.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

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

}  // namespace
}  // namespace etcdq::consensus
