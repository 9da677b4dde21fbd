// libraft's file system probe as the link leaves it (raft/log_writes.h): no
// direct I/O and no kernel AIO, whatever the data dir's file system offers.
// UvFsProbeCapabilities is called by name, as libraft's uv.c calls it: the
// link's --wrap sends this call to the wrapper as it sends libraft's.
#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <random>
#include <string>

#include "raft/log_writes.h"

extern "C" {
#include <raft.h>
// libraft's internal uv_fs.h (not installed): the probe of a data dir.
int UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg);
}

namespace {

namespace fs = std::filesystem;

class LogWrites : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("etcdq-probe-" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(LogWrites, ProbeReportsBufferedSynchronousWrites) {
  size_t direct = 12345;
  bool async = true;
  char errmsg[RAFT_ERRMSG_BUF_SIZE] = {0};
  ASSERT_EQ(UvFsProbeCapabilities(dir_.c_str(), &direct, &async, errmsg), 0) << errmsg;
  EXPECT_EQ(direct, 0u);
  EXPECT_FALSE(async);
  // The control: libraft's own answer here (on ext4: direct I/O with 4 KiB
  // blocks and kernel AIO; on tmpfs neither), so the test shows what the
  // wrap changed on this machine.
  size_t real_direct = 0;
  bool real_async = false;
  ASSERT_EQ(__real_UvFsProbeCapabilities(dir_.c_str(), &real_direct, &real_async, errmsg), 0) << errmsg;
  RecordProperty("libraft_direct", static_cast<int>(real_direct));
  RecordProperty("libraft_async", real_async ? 1 : 0);
}

TEST_F(LogWrites, ProbeErrorsStand) {
  size_t direct = 0;
  bool async = false;
  char errmsg[RAFT_ERRMSG_BUF_SIZE] = {0};
  EXPECT_NE(UvFsProbeCapabilities((dir_ / "missing").c_str(), &direct, &async, errmsg), 0);
  EXPECT_NE(errmsg[0], '\0');
}

}  // namespace
