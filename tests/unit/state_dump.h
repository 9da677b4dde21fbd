// Tests: a member's whole key space as text (every key with its value,
// create and mod revision and version, and the store's revision), to
// compare members' states for equality.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "apply/kv.h"
#include "mvcc/store.h"

namespace etcdq::testing {

inline std::string state_dump(const mvcc::Store& store) {
  etcdserverpb::RangeRequest r;
  r.set_key(std::string(1, '\0'));
  r.set_range_end(std::string(1, '\0'));
  etcdserverpb::RangeResponse resp;
  auto view = store.view();
  apply::ViewState s(*view);
  EXPECT_FALSE(apply::range(s, r, &resp));
  std::string out = "rev=" + std::to_string(view->revision()) + "\n";
  for (const auto& kv : resp.kvs()) {
    out += kv.key() + "=" + kv.value() + " c" + std::to_string(kv.create_revision()) + " m" +
           std::to_string(kv.mod_revision()) + " v" + std::to_string(kv.version()) + "\n";
  }
  return out;
}

}  // namespace etcdq::testing
