#include "common/progress.h"

#include <cstdlib>
#include <string>

namespace etcdq::common {

std::chrono::milliseconds progress_interval() {
  static const std::chrono::milliseconds interval = [] {
    const char* v = std::getenv("ETCDQ_PROGRESS_INTERVAL_MS");
    if (v == nullptr || *v == '\0') return std::chrono::milliseconds(1000);
    char* end = nullptr;
    long long ms = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0' || ms < 0) return std::chrono::milliseconds(1000);
    return std::chrono::milliseconds(ms);
  }();
  return interval;
}

}  // namespace etcdq::common
