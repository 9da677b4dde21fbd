// The watch writer threads (server/watch_writers.h): a task posted after
// kicks runs only once every one of them has run, whichever thread ran
// them; with nothing pending it is not taken; kicks posted behind a task
// still run; the destructor runs everything queued.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "server/watch_writers.h"

using etcdq::server::Kickable;
using etcdq::server::WatchWriters;

namespace {

// A kick that counts itself, optionally held until released (a write that
// takes a while on one thread while the other thread goes on).
class CountingKick : public Kickable {
 public:
  explicit CountingKick(std::atomic<int>* done, bool hold = false) : done_(done), hold_(hold) {}
  void kick() override {
    if (hold_) {
      std::unique_lock<std::mutex> lock(mu_);
      started_ = true;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
    }
    done_->fetch_add(1);
  }
  void wait_started() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return started_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::atomic<int>* done_;
  bool hold_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool released_ = false;
};

bool wait_for(const std::function<bool()>& pred) {
  for (int i = 0; i < 2000 && !pred(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return pred();
}

TEST(WatchWriters, NothingPendingLeavesTheTaskToTheCaller) {
  WatchWriters w(2);
  bool ran = false;
  std::function<void()> task = [&ran] { ran = true; };
  EXPECT_FALSE(w.post_after_writes(task));
  ASSERT_TRUE(task);  // left as it was
  task();
  EXPECT_TRUE(ran);

  std::atomic<int> done{0};
  CountingKick k(&done);
  w.post(&k);
  ASSERT_TRUE(wait_for([&] { return done.load() == 1; }));
  // Finished kicks are not pending.
  ASSERT_TRUE(wait_for([&] {
    std::function<void()> t = [] {};
    return !w.post_after_writes(t);
  }));
}

TEST(WatchWriters, ATaskWaitsForKicksAnotherThreadIsRunning) {
  WatchWriters w(2);
  std::atomic<int> done{0};
  CountingKick slow(&done, /*hold=*/true);
  w.post(&slow);
  slow.wait_started();  // one thread is inside this kick

  std::vector<std::unique_ptr<CountingKick>> quick;
  for (int i = 0; i < 8; ++i) {
    quick.push_back(std::make_unique<CountingKick>(&done));
    w.post(quick.back().get());
  }
  std::atomic<int> seen_at_task{-1};
  std::function<void()> task = [&] { seen_at_task = done.load(); };
  ASSERT_TRUE(w.post_after_writes(task));
  // Kicks behind the task: not held back by it once it ran.
  CountingKick after(&done);
  w.post(&after);

  // The other thread runs the eight quick kicks; the task must not run
  // while the slow one is still inside its kick.
  ASSERT_TRUE(wait_for([&] { return done.load() >= 8; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(seen_at_task.load(), -1);
  EXPECT_EQ(done.load(), 8);

  slow.release();
  ASSERT_TRUE(wait_for([&] { return done.load() == 10; }));
  ASSERT_TRUE(wait_for([&] { return seen_at_task.load() != -1; }));
  // Every kick posted before it had run (the one posted after may run on
  // the other thread at the same time: it does not wait for the task).
  EXPECT_GE(seen_at_task.load(), 9);
}

TEST(WatchWriters, TheDestructorRunsWhatIsQueued) {
  std::atomic<int> done{0};
  std::atomic<int> tasks{0};
  std::vector<std::unique_ptr<CountingKick>> kicks;
  for (int i = 0; i < 100; ++i) kicks.push_back(std::make_unique<CountingKick>(&done));
  {
    WatchWriters w(2);
    for (int i = 0; i < 100; ++i) {
      w.post(kicks[static_cast<size_t>(i)].get());
      if (i % 10 == 9) {
        std::function<void()> task = [&tasks] { tasks.fetch_add(1); };
        if (!w.post_after_writes(task)) task();
      }
    }
  }
  EXPECT_EQ(done.load(), 100);
  EXPECT_EQ(tasks.load(), 10);
}

}  // namespace
