// How libraft's log segments are written, as the link leaves it: written
// with zeros before libraft appends to them (raft/written_segments.h), and
// appended with buffered synced writes, not direct AIO (raft/log_writes.h).
// posix_fallocate is called by name, as libraft's uv_fs.c does: the link's
// --wrap sends this call to the wrapper as it sends libraft's, so the
// outcome proves the link as much as the wrapper.
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "raft/log_writes.h"
#include "raft/written_segments.h"

extern "C" {
#include <raft.h>
// libraft's internal uv_fs.h (not installed): the probe of a data dir.
int UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg);
}

namespace {

namespace fs = std::filesystem;

// The file's extents as the file system reports them; false if it cannot.
bool extents(int fd, std::vector<struct fiemap_extent>* out) {
  constexpr unsigned kMax = 256;
  std::vector<char> buf(sizeof(struct fiemap) + kMax * sizeof(struct fiemap_extent));
  auto* fm = reinterpret_cast<struct fiemap*>(buf.data());
  fm->fm_start = 0;
  fm->fm_length = FIEMAP_MAX_OFFSET;
  fm->fm_flags = FIEMAP_FLAG_SYNC;
  fm->fm_extent_count = kMax;
  if (ioctl(fd, FS_IOC_FIEMAP, fm) != 0) return false;
  out->assign(fm->fm_extents, fm->fm_extents + fm->fm_mapped_extents);
  return true;
}

bool any_unwritten(const std::vector<struct fiemap_extent>& ex) {
  for (const auto& e : ex) {
    if (e.fe_flags & FIEMAP_EXTENT_UNWRITTEN) return true;
  }
  return false;
}

class WrittenSegments : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("etcdq-segments-" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Opened as libraft opens a new segment (uv_fs.c, UvFsAllocateFile).
  int create(const std::string& name) {
    return ::open((dir_ / name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_DSYNC, 0600);
  }
  // A new file `name` of `size` bytes reserved by `allocate`; its extents in
  // *ex, mapped false if the file system cannot tell them.
  void reserve(const std::string& name, int (*allocate)(int, off_t, off_t), off_t size,
               std::vector<struct fiemap_extent>* ex, bool* mapped) {
    int fd = create(name);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(allocate(fd, 0, size), 0);
    *mapped = extents(fd, ex);
    ::close(fd);
  }
  fs::path dir_;
};

constexpr off_t kSegment = 1 << 20;

TEST_F(WrittenSegments, ReservedSpaceIsWrittenAndReadsAsZeros) {
  std::vector<struct fiemap_extent> ex;
  bool mapped = false;
  ASSERT_NO_FATAL_FAILURE(reserve("open-1", posix_fallocate, kSegment, &ex, &mapped));
  EXPECT_EQ(fs::file_size(dir_ / "open-1"), static_cast<uintmax_t>(kSegment));
  std::string bytes(kSegment, 'x');
  int rfd = ::open((dir_ / "open-1").c_str(), O_RDONLY);
  ASSERT_GE(rfd, 0);
  ASSERT_EQ(::pread(rfd, bytes.data(), bytes.size(), 0), kSegment);
  ::close(rfd);
  EXPECT_EQ(bytes, std::string(kSegment, '\0'));
  // The control: glibc's own call on this file system. Where it leaves no
  // unwritten extent (tmpfs, or no FIEMAP) there is nothing to compare.
  std::vector<struct fiemap_extent> reserved;
  bool control_mapped = false;
  ASSERT_NO_FATAL_FAILURE(reserve("control", __real_posix_fallocate, kSegment, &reserved, &control_mapped));
  if (!mapped || !control_mapped || !any_unwritten(reserved)) {
    GTEST_SKIP() << dir_ << " leaves no unwritten extents: the wrapper's writes are not checked here";
  }
  ASSERT_FALSE(ex.empty());
  EXPECT_FALSE(any_unwritten(ex)) << "an extent is still unwritten: the first append into it would commit the journal";
}

TEST_F(WrittenSegments, ErrorsAreReturnedAsPosixFallocateReturnsThem) {
  EXPECT_EQ(posix_fallocate(-1, 0, kSegment), EBADF);
  int fd = create("open-3");
  ASSERT_GE(fd, 0);
  EXPECT_EQ(posix_fallocate(fd, 0, -1), EINVAL);
  ::close(fd);
  int ro = ::open((dir_ / "open-3").c_str(), O_RDONLY);
  ASSERT_GE(ro, 0);
  EXPECT_EQ(posix_fallocate(ro, 0, kSegment), EBADF);
  ::close(ro);
  EXPECT_EQ(fs::file_size(dir_ / "open-3"), 0u);
}

// UvFsProbeCapabilities is called by name, as libraft's uv.c calls it: the
// link's --wrap sends this call to the wrapper as it sends libraft's.
TEST_F(WrittenSegments, ProbeReportsBufferedSynchronousWrites) {
  char errmsg[RAFT_ERRMSG_BUF_SIZE] = {0};
  // libraft's own answer here first (on ext4: direct I/O with 4 KiB blocks
  // and kernel AIO; on tmpfs neither, and then the wrap cannot be told
  // apart from it).
  size_t real_direct = 0;
  bool real_async = false;
  ASSERT_EQ(__real_UvFsProbeCapabilities(dir_.c_str(), &real_direct, &real_async, errmsg), 0) << errmsg;
  size_t direct = 12345;
  bool async = true;
  ASSERT_EQ(UvFsProbeCapabilities(dir_.c_str(), &direct, &async, errmsg), 0) << errmsg;
  EXPECT_EQ(direct, 0u);
  EXPECT_FALSE(async);
  if (real_direct == 0 && !real_async) {
    GTEST_SKIP() << dir_ << " offers neither direct I/O nor kernel AIO: the wrap changes nothing here";
  }
}

TEST_F(WrittenSegments, ProbeErrorsStand) {
  size_t direct = 0;
  bool async = false;
  char errmsg[RAFT_ERRMSG_BUF_SIZE] = {0};
  EXPECT_NE(UvFsProbeCapabilities((dir_ / "missing").c_str(), &direct, &async, errmsg), 0);
  EXPECT_NE(errmsg[0], '\0');
}

}  // namespace
