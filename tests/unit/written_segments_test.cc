// How libraft's log segments are written, as the link leaves it: written
// with zeros before libraft appends to them (consensus/libraft_patches.h, patch 2), and
// appended with buffered synced writes, not direct AIO, on the loop's own
// thread when it takes them (patches 3-5).
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
#include <chrono>
#include <thread>
#include <vector>

#include "consensus/libraft_patches.h"
#include "test_files.h"

extern "C" {
#include <raft.h>
#include <raft/uv.h>
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

// An InlineWrites that records what libraft's appends offer it and keeps
// their completions for the test to run.
struct RecordingInline final : etcdq::consensus::InlineWrites {
  bool accept = true;
  std::vector<size_t> offered;
  std::vector<std::pair<uv_work_t*, uv_after_work_cb>> done;
  bool take(size_t bytes) override {
    offered.push_back(bytes);
    return accept;
  }
  void completed(uv_work_t* work, uv_after_work_cb after) override { done.emplace_back(work, after); }
};

// libraft's uv I/O on the fixture's dir, driven by a loop on this thread.
class UvLog {
 public:
  explicit UvLog(const fs::path& dir) {
    EXPECT_EQ(uv_loop_init(&loop_), 0);
    EXPECT_EQ(raft_uv_tcp_init(&transport_, &loop_), 0);
    EXPECT_EQ(raft_uv_init(&io_, &loop_, dir.c_str(), &transport_), 0);
    EXPECT_EQ(io_.init(&io_, 1, "127.0.0.1:9"), 0) << io_.errmsg;
    raft_term term = 0;
    raft_id voted_for = 0;
    struct raft_snapshot* snapshot = nullptr;
    raft_index start = 0;
    EXPECT_EQ(io_.load(&io_, &term, &voted_for, &snapshot, &start, &entries, &n_entries), 0) << io_.errmsg;
    // As a member that joined term 1: libraft keeps a log only beside metadata.
    if (term == 0) {
      EXPECT_EQ(io_.set_term(&io_, 1), 0) << io_.errmsg;
    }
  }
  ~UvLog() {
    for (size_t i = 0; i < n_entries; ++i) raft_free(entries[i].batch);
    raft_free(entries);
    io_.close(&io_, nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
    raft_uv_close(&io_);
    raft_uv_tcp_close(&transport_);
    uv_loop_close(&loop_);
  }
  // Appends `data` as one command entry; *status is set when libraft's
  // callback runs.
  void append(const std::string& data, int* status) {
    // The caller owns an appended entry's buffer (libraft encodes it into
    // the segment's write buffer); kept until the next append.
    data_ = data;
    entry_ = {};
    entry_.term = 1;
    entry_.type = RAFT_COMMAND;
    entry_.buf.len = data_.size();
    entry_.buf.base = data_.data();
    req_.data = status;
    ASSERT_EQ(io_.append(&io_, &req_, &entry_, 1, [](struct raft_io_append* r, int st) {
      *static_cast<int*>(r->data) = st;
    }), 0) << io_.errmsg;
  }
  // Runs the loop until `done` holds or 10 s pass.
  template <typename F>
  bool run_until(F done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      uv_run(&loop_, UV_RUN_NOWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  }
  struct raft_entry* entries = nullptr;  // what load() found
  size_t n_entries = 0;

 private:
  uv_loop_t loop_{};
  struct raft_uv_transport transport_ {};
  struct raft_io io_ {};
  struct raft_io_append req_ {};
  struct raft_entry entry_ {};
  std::string data_;
};

// The loop thread's InlineWrites takes an append: its write is on file when
// libraft's submit returns (it ran right there), and libraft hears of it
// only when the completion runs. One it refuses goes to libuv's pool.
// Both are in the closed segment once libraft closed the log.
TEST_F(WrittenSegments, AppendsTakenByTheLoopAreWrittenBeforeTheyComplete) {
  RecordingInline rec;
  etcdq::consensus::set_inline_writes(&rec);
  {
    UvLog log(dir_);
    ASSERT_EQ(log.n_entries, 0u);
    int status = -1;
    ASSERT_NO_FATAL_FAILURE(log.append("taken-by-the-loop", &status));
    // The first append waits for a segment prepared on the pool.
    ASSERT_TRUE(log.run_until([&] { return !rec.done.empty() || status != -1; }));
    ASSERT_EQ(rec.done.size(), 1u);
    ASSERT_EQ(rec.offered.size(), 1u);
    EXPECT_GE(rec.offered[0], std::string("taken-by-the-loop").size());
    EXPECT_EQ(status, -1) << "libraft heard of the write before its completion ran";
    EXPECT_NE(etcdq::test_util::read_all(dir_ / "open-1").find("taken-by-the-loop"), std::string::npos);
    auto [work, after] = rec.done[0];
    after(work, 0);
    EXPECT_EQ(status, 0);

    rec.accept = false;
    status = -1;
    ASSERT_NO_FATAL_FAILURE(log.append("refused-by-the-loop", &status));
    ASSERT_TRUE(log.run_until([&] { return status != -1; }));
    EXPECT_EQ(status, 0);
    EXPECT_EQ(rec.offered.size(), 2u);
    EXPECT_EQ(rec.done.size(), 1u) << "a refused write was run on the loop";
  }
  etcdq::consensus::set_inline_writes(nullptr);
  // Closed with both (libraft renames the open segment on close).
  std::string log;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().filename().string().find('-') != std::string::npos) log += etcdq::test_util::read_all(e.path());
  }
  EXPECT_NE(log.find("taken-by-the-loop"), std::string::npos);
  EXPECT_NE(log.find("refused-by-the-loop"), std::string::npos);
}

}  // namespace
