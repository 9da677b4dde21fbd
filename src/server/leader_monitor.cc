#include "server/leader_monitor.h"

namespace etcdq::server {

LeaderMonitor::LeaderMonitor(std::chrono::milliseconds election_timeout, std::function<bool()> has_leader,
                             std::function<void()> on_lost)
    : tick_(election_timeout.count() > 0 ? election_timeout : std::chrono::milliseconds(1000)),
      has_leader_(std::move(has_leader)),
      on_lost_(std::move(on_lost)),
      thread_([this] { run(); }) {}

LeaderMonitor::~LeaderMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LeaderMonitor::run() {
  int without_leader = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, tick_, [this] { return stopping_; })) {
    lock.unlock();
    without_leader = has_leader_() ? 0 : without_leader + 1;
    if (without_leader >= kNoLeaderTicks) on_lost_();
    lock.lock();
  }
}

}  // namespace etcdq::server
