#include "common/executor.h"

#include "common/thread_name.h"

namespace etcdq {

Executor::Executor(int threads, const std::string& name) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name] {
      set_thread_name(name);
      run();
    });
  }
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Executor::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

bool Executor::try_post(std::function<void()> task, size_t max_queued) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= max_queued) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void Executor::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    auto task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace etcdq
