#include "server/watch_writers.h"

#include "common/thread_name.h"

namespace etcdq::server {

WatchWriters::WatchWriters(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] {
    set_thread_name("watch-writer");
    run();
  });
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
    // A thread that is awake takes the whole list when it looks again: only
    // an empty list with a sleeping thread needs a wake-up.
    wake = ready_.empty() && idle_ > 0;
    ready_.push_back(k);
  }
  if (wake) cv_.notify_one();
}

void WatchWriters::run() {
  std::vector<Kickable*> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (ready_.empty()) {
      if (stop_) return;
      ++idle_;
      cv_.wait(lock, [this] { return stop_ || !ready_.empty(); });
      --idle_;
      continue;
    }
    batch.swap(ready_);  // what is posted meanwhile wakes the other thread
    lock.unlock();
    for (Kickable* k : batch) k->kick();
    batch.clear();
    lock.lock();
  }
}

}  // namespace etcdq::server
