#include "lease/expiry.h"

#include <vector>

#include "common/thread_name.h"

namespace etcdq::lease {

Expiry::Expiry(Lessor* lessor, Revoke revoke) : lessor_(lessor), revoke_(std::move(revoke)) {
  thread_ = std::thread([this] {
    set_thread_name("lease-expiry");
    run();
  });
}

Expiry::~Expiry() { stop(); }

void Expiry::start_leading() {
  // Before any check: clocks the old leader ran are not ours.
  lessor_->restart_clocks();
  {
    std::lock_guard<std::mutex> lock(mu_);
    leading_ = true;
  }
  cv_.notify_all();
}

void Expiry::stop_leading() {
  std::lock_guard<std::mutex> lock(mu_);
  leading_ = false;
}

void Expiry::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Expiry::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // A follower sleeps until it leads; a leader checks every kCheck.
    cv_.wait(lock, [this] { return stop_ || leading_; });
    cv_.wait_for(lock, kCheck, [this] { return stop_; });
    if (stop_) return;
    if (!leading_ || revoking_.size() >= kMaxRevokesInFlight) continue;
    lock.unlock();
    std::vector<int64_t> due = lessor_->expired(Clock::now(), kMaxRevokesInFlight);
    lock.lock();
    for (int64_t id : due) {
      if (stop_ || !leading_ || revoking_.size() >= kMaxRevokesInFlight) break;
      if (!revoking_.insert(id).second) continue;
      lock.unlock();
      revoke_(id, [this, id] {
        std::lock_guard<std::mutex> l(mu_);
        revoking_.erase(id);
      });
      lock.lock();
    }
  }
}

}  // namespace etcdq::lease
