// Lease ids chosen by the proposer when the client leaves ID 0, after
// etcd's idutil.Generator: the member id in the top bits, then a counter
// started from the wall clock in milliseconds, so ids from different
// members and different runs do not collide. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace etcdq::lease {

class IdGenerator {
 public:
  explicit IdGenerator(uint64_t member_id);
  // A positive id that prints as 16 hex digits (the top 16 bits are kept
  // between 0x1000 and 0x7fff), as clients and tools expect.
  int64_t next();

 private:
  uint64_t prefix_;
  std::atomic<uint64_t> suffix_;
};

}  // namespace etcdq::lease
