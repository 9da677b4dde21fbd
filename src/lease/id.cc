#include "lease/id.h"

#include <chrono>

namespace etcdq::lease {

IdGenerator::IdGenerator(uint64_t member_id)
    : prefix_(member_id & 0x7fff),
      suffix_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count())
              << 8) {
  if (prefix_ < 0x1000) prefix_ |= 0x1000;
}

int64_t IdGenerator::next() {
  uint64_t suffix = suffix_.fetch_add(1, std::memory_order_relaxed) & ((1ULL << 48) - 1);
  return static_cast<int64_t>((prefix_ << 48) | suffix);
}

}  // namespace etcdq::lease
