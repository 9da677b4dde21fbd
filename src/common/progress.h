// Paces the progress lines of long operations (issue #36: defrag,
// compaction, snapshot save and `etcdq snapshot restore` log a start,
// progress at most once a second, and an end with size and duration).
//
// progress_interval() is one second, or ETCDQ_PROGRESS_INTERVAL_MS
// milliseconds when that is set (0: a line at every step the operation
// checks). A test knob, read once: tests/integration/
// test_long_operation_logs.py sets it to 0 so that a data set of a few
// hundred kilobytes shows the progress lines a real one shows after
// seconds (README, "When things go wrong").
//
// Thread-safety: progress_interval() from any thread; a ProgressPacer
// belongs to one operation, on its thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace etcdq::common {

std::chrono::milliseconds progress_interval();

class ProgressPacer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ProgressPacer(Clock::duration every = progress_interval()) : every_(every), start_(Clock::now()), last_(start_) {}
  // Whether a progress line is due now; if so, the next one is due
  // `every` from now.
  bool due() {
    auto now = Clock::now();
    if (now - last_ < every_) return false;
    last_ = now;
    return true;
  }
  // Since the operation started (the pacer was made).
  int64_t elapsed_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
  }

 private:
  Clock::duration every_;
  Clock::time_point start_, last_;
};

}  // namespace etcdq::common
