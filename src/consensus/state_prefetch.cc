#include "consensus/state_prefetch.h"

#include <spdlog/spdlog.h>

namespace etcdq::consensus {

void StatePrefetch::start(InstallPlan plan, std::function<uint64_t(const std::string&)> member_of) {
  if (thread_.joinable()) {
    if (!done_.load()) return;  // one transfer at a time
    join();
  }
  if (staged_) {
    if (staged_->applied_index() >= plan.min_index) return;  // what is staged will do
    staged_.reset();
  }
  cancel_ = false;
  done_ = false;
  error_ = {};
  min_index_ = plan.min_index;
  spdlog::info("fetching the state for the snapshot at index {} while it is stored", plan.min_index);
  thread_ = std::thread([this, plan = std::move(plan), member_of = std::move(member_of)] {
    std::unique_ptr<Fsm::Staged> staged;
    Error e = stage_state(fsm_, *forwarder_, plan, &staged, member_of, &cancel_);
    // Read by the consensus thread after join().
    staged_ = std::move(staged);
    error_ = e;
    done_ = true;
  });
}

void StatePrefetch::join() {
  if (!thread_.joinable()) return;
  thread_.join();
  finished_at_ = Clock::now();
}

std::unique_ptr<Fsm::Staged> StatePrefetch::take(uint64_t min_index) {
  if (!thread_.joinable() && !staged_) return nullptr;
  join();
  std::unique_ptr<Fsm::Staged> staged = std::move(staged_);
  if (!staged) {
    spdlog::info("the state fetched for the snapshot at index {} is not at hand ({}): fetching it again", min_index,
                 error_ ? error_.message() : "none");
    return nullptr;
  }
  if (staged->applied_index() < min_index) {
    spdlog::info("the state fetched for the snapshot at index {} is at index {}, below {}: fetching it again",
                 min_index_, staged->applied_index(), min_index);
    return nullptr;
  }
  return staged;
}

void StatePrefetch::expire(Clock::time_point now) {
  if (thread_.joinable()) {
    if (!done_.load()) return;
    join();  // finished: at once
  }
  if (staged_ && now - finished_at_ > kKeep) {
    spdlog::info("dropping the state fetched for the snapshot at index {}: no install took it", min_index_);
    staged_.reset();
  }
}

void StatePrefetch::drop() {
  cancel_ = true;
  join();
  staged_.reset();
}

}  // namespace etcdq::consensus
