// Per-queue settings, Put by an operator as JSON to /q/{queue}/config:
//
//   {"visibility_timeout": 30, "max_deliveries": 5, "max_in_flight": 64}
//
// visibility_timeout: seconds (may be fractional, > 0, at most a day) a
//   consumer holds a delivered message before it is delivered again;
// max_deliveries: deliveries (>= 1) before the message moves to the
//   dead-letter queue;
// max_in_flight: messages (>= 1) one consumer holds unacknowledged at once.
// Absent fields keep their defaults. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace etcdq::queue {

struct Config {
  int64_t visibility_ms = 30000;
  uint32_t max_deliveries = 5;
  uint32_t max_in_flight = 64;
};

// Errors: errors::invalid_argument naming what is wrong; `out` unchanged.
Error parse_config(std::string_view json, Config* out);

}  // namespace etcdq::queue
