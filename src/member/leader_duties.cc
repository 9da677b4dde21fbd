#include "member/leader_duties.h"

#include <spdlog/spdlog.h>

#include "common/thread_name.h"

namespace etcdq::member {

LeaderDuties::~LeaderDuties() { stop(); }

void LeaderDuties::add(Duty duty) { duties_.push_back(std::move(duty)); }

void LeaderDuties::start() {
  thread_ = std::thread([this] {
    set_thread_name("leader-duties");
    run();
  });
}

void LeaderDuties::role_changed(bool leading) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    want_leading_ = leading;
  }
  cv_.notify_all();
}

void LeaderDuties::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaderDuties::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || want_leading_ != leading_; });
    bool lead = stop_ ? false : want_leading_;
    bool done = stop_;
    lock.unlock();
    if (lead != leading_) {
      leading_ = lead;
      spdlog::info("{} leader-only work ({} duties)", lead ? "starting" : "stopping", duties_.size());
      if (lead) {
        for (auto& d : duties_) d.start();
      } else {
        for (auto it = duties_.rbegin(); it != duties_.rend(); ++it) it->stop();
      }
    }
    lock.lock();
    if (done) return;
  }
}

}  // namespace etcdq::member
