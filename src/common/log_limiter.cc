#include "common/log_limiter.h"

namespace etcdq {

bool LogLimiter::allow_at(Clock::time_point now, uint64_t* suppressed) {
  std::lock_guard<std::mutex> l(mu_);
  if (!started_ || now - window_start_ >= window_) {
    started_ = true;
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace etcdq
