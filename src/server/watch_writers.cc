#include "server/watch_writers.h"

namespace etcdq::server {

WatchWriters::WatchWriters(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

WatchWriters::~WatchWriters() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WatchWriters::post(Kickable* k) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A thread that is awake looks at the queue again before it sleeps:
    // only an empty queue with a sleeping thread needs a wake-up.
    wake = ready_.empty() && idle_ > 0;
    ready_.push_back(Item{k, {}, 0});
    ++posted_;
  }
  if (wake) cv_.notify_one();
}

bool WatchWriters::post_after_writes(std::function<void()>& task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ == posted_) return false;
  // Some kick before it is still queued or running: the thread that
  // finishes the last of them finds this at the head and runs it, so no
  // wake-up is needed.
  ready_.push_back(Item{nullptr, std::move(task), posted_});
  return true;
}

void WatchWriters::run() {
  std::vector<Kickable*> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!ready_.empty() && ready_.front().kick != nullptr) {
      // The kicks up to the next task, at once; what is posted meanwhile
      // wakes the other thread.
      while (!ready_.empty() && ready_.front().kick != nullptr) {
        batch.push_back(ready_.front().kick);
        ready_.pop_front();
      }
      lock.unlock();
      for (Kickable* k : batch) k->kick();
      lock.lock();
      finished_ += batch.size();
      batch.clear();
      continue;
    }
    if (!ready_.empty() && finished_ >= ready_.front().kicks_before) {
      std::function<void()> task = std::move(ready_.front().task);
      ready_.pop_front();
      bool more = !ready_.empty() && idle_ > 0;
      lock.unlock();
      if (more) cv_.notify_one();  // kicks behind the task need not wait for it
      task();
      lock.lock();
      continue;
    }
    // Nothing queued, or a task waiting for kicks another thread is
    // running (that thread runs it when they are done).
    if (ready_.empty() && stop_) {
      cv_.notify_all();  // a thread asleep behind a task that ran since
      return;
    }
    ++idle_;
    cv_.wait(lock);
    --idle_;
  }
}

}  // namespace etcdq::server
