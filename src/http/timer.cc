#include "http/timer.h"

#include <utility>

namespace etcdq::http {

Timer::Timer() : thread_([this] { loop(); }) {}

Timer::~Timer() { stop(); }

Timer::Id Timer::after(Clock::duration delay, std::function<void()> fn) {
  Id id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = Id(Clock::now() + delay, ++next_id_);
    if (stopping_) return id;
    due_.emplace(id, std::move(fn));
  }
  cv_.notify_one();
  return id;
}

void Timer::cancel(const Id& id) {
  std::function<void()> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = due_.find(id);
  if (it == due_.end()) return;
  dropped = std::move(it->second);  // destroyed after the lock is released (declared before it)
  due_.erase(it);
}

void Timer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::map<Id, std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped.swap(due_);
  }
  // Destroyed here, outside the lock: what they hold may call after().
}

void Timer::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = due_.begin();
    if (first->first.first > Clock::now()) {
      // A copy: wait_until reads its time_point after it woke, and cancel()
      // may have erased the entry meanwhile (ASan saw it).
      const Clock::time_point when = first->first.first;
      cv_.wait_until(lock, when);
      continue;
    }
    std::function<void()> fn = std::move(first->second);
    due_.erase(first);
    lock.unlock();
    fn();
    fn = nullptr;  // what it holds goes before the lock is taken again
    lock.lock();
  }
}

}  // namespace etcdq::http
