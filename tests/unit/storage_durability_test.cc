// storage::Durability (storage/engine.h): what a crash of the process keeps
// of kLogged and kReplayed writes, and what size_bytes() counts. The crash is
// a child process's _exit without closing the database: RocksDB's memtables
// go with the process, its files stay.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "storage/batch.h"
#include "storage/engine.h"

namespace etcdq::storage {
namespace {

class StorageDurability : public ::testing::Test {
 protected:
  void SetUp() override {
    // The death test's child runs this test again from the start: it takes
    // the parent's directory (crash_after), not a new one.
    if (const char* d = std::getenv(kDirEnv)) {
      dir_ = d;
      return;
    }
    char tmpl[] = "/tmp/etcdq-durability-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static constexpr const char* kDirEnv = "ETCDQ_DURABILITY_TEST_DIR";

  // Runs `fn` on the database in a child process that then exits without
  // closing it; the child exits 0 when every step worked. A death test in
  // the "threadsafe" style: the child is a fresh run of this binary (a bare
  // fork of a process whose other tests left threads behind can deadlock).
  void crash_after(const std::function<bool(Engine&)>& fn) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const std::string dir = dir_;
    setenv(kDirEnv, dir.c_str(), 1);
    EXPECT_EXIT(
        {
          std::unique_ptr<Engine> e;
          bool ok = !Engine::open(dir, &e) && fn(*e);
          _exit(ok ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
    unsetenv(kDirEnv);
  }

  std::string dir_;
};

bool durability_put(Engine& e, Cf cf, const std::string& key, const std::string& value, Durability d) {
  Batch b(&e);
  b.put(cf, key, value);
  return !e.write(b, d);
}

std::string durability_get(Engine& e, Cf cf, const std::string& key) {
  std::string v;
  return e.get(cf, key, &v) ? v : "<none>";
}

TEST_F(StorageDurability, ReplayedWritesNeedAFlushLoggedOnesDoNot) {
  crash_after([](Engine& e) {
    return durability_put(e, Cf::kLatest, "logged", "a", Durability::kLogged) &&
           durability_put(e, Cf::kLatest, "flushed", "b", Durability::kReplayed) &&
           durability_put(e, Cf::kRevlog, "flushed", "b", Durability::kReplayed) && !e.make_durable() &&
           durability_put(e, Cf::kLatest, "unflushed", "c", Durability::kReplayed) &&
           durability_put(e, Cf::kMeta, "unflushed", "c", Durability::kReplayed);
  });
  std::unique_ptr<Engine> e;
  ASSERT_FALSE(Engine::open(dir_, &e));
  // A data dir whose writes went through RocksDB's log (every write before
  // Durability existed) opens with them.
  EXPECT_EQ(durability_get(*e, Cf::kLatest, "logged"), "a");
  EXPECT_EQ(durability_get(*e, Cf::kLatest, "flushed"), "b");
  EXPECT_EQ(durability_get(*e, Cf::kRevlog, "flushed"), "b");
  // Gone with the process, in every column family: the Raft log applies
  // them again.
  EXPECT_EQ(durability_get(*e, Cf::kLatest, "unflushed"), "<none>");
  EXPECT_EQ(durability_get(*e, Cf::kMeta, "unflushed"), "<none>");
}

TEST_F(StorageDurability, CleanCloseKeepsReplayedWrites) {
  {
    std::unique_ptr<Engine> e;
    ASSERT_FALSE(Engine::open(dir_, &e));
    ASSERT_TRUE(durability_put(*e, Cf::kHistory, "k", "v", Durability::kReplayed));
  }
  std::unique_ptr<Engine> e;
  ASSERT_FALSE(Engine::open(dir_, &e));
  EXPECT_EQ(durability_get(*e, Cf::kHistory, "k"), "v");
}

TEST_F(StorageDurability, SizeCountsReplayedBytesBeforeTheyAreFlushed) {
  std::unique_ptr<Engine> e;
  ASSERT_FALSE(Engine::open(dir_, &e));
  const int64_t before = e->size_bytes();
  const std::string value(1 << 20, 'x');  // compresses to little once flushed
  ASSERT_TRUE(durability_put(*e, Cf::kLatest, "big", value, Durability::kReplayed));
  std::this_thread::sleep_for(std::chrono::nanoseconds(Engine::kSizeRefreshNs + 10'000'000));
  EXPECT_GE(e->size_bytes(), before + (1 << 20));
  ASSERT_FALSE(e->make_durable());
  std::this_thread::sleep_for(std::chrono::nanoseconds(Engine::kSizeRefreshNs + 10'000'000));
  // Flushed: the table file counts instead (LZ4 makes it small).
  EXPECT_LT(e->size_bytes(), before + (1 << 20));
}

}  // namespace
}  // namespace etcdq::storage
