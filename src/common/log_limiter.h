// A bound on how often one kind of warning is logged, for warnings a remote
// party can cause at will (a malformed peer connection, a refused sender, a
// failed accept): at most `burst` lines per `window`; the rest are counted,
// and the next line allowed says how many were left out. Without it, a
// client that opens connections in a loop fills the member's disk with log.
//
// Thread-safety: allow() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace etcdq {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  LogLimiter(uint64_t burst, Clock::duration window) : burst_(burst), window_(window) {}

  // True when a line may be logged now; then *suppressed is the number of
  // lines refused since the last one allowed (0 if none).
  bool allow(uint64_t* suppressed) { return allow_at(Clock::now(), suppressed); }
  // The same at a given time (tests).
  bool allow_at(Clock::time_point now, uint64_t* suppressed);

 private:
  const uint64_t burst_;
  const Clock::duration window_;
  std::mutex mu_;
  Clock::time_point window_start_{};
  bool started_ = false;
  uint64_t in_window_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace etcdq
