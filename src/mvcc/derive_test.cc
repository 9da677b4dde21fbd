// LatestFromHistory (mvcc/derive.h): the latest pairs rebuilt from history
// pairs as a snapshot's sender streams them, and the orders it refuses.
#include "mvcc/derive.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "mvcc/codec.h"

namespace etcdq::mvcc {
namespace {

std::string derive_put_record(std::string_view body) {
  std::string r(1, static_cast<char>(RecordType::kPut));
  r.append(32, 'h');  // the header's bytes, not read here
  r.append(body);
  return r;
}

struct DeriveTestRun {
  std::vector<std::pair<std::string, std::string>> latest;
  LatestFromHistory derive{[this](std::string_view k, std::string_view rec) {
    latest.emplace_back(std::string(k), std::string(rec));
    return Error();
  }};
};

TEST(LatestFromHistory, TheNewestVersionOfEachLiveKeyIsItsLatest) {
  DeriveTestRun run;
  const std::string tomb(1, static_cast<char>(RecordType::kDelete));
  ASSERT_FALSE(run.derive.add(history_key(std::string("a\0", 2), {7, 0}), derive_put_record("a7")));
  ASSERT_FALSE(run.derive.add(history_key(std::string("a\0", 2), {3, 0}), derive_put_record("a3")));
  ASSERT_FALSE(run.derive.add(history_key("b", {9, 0}), tomb));  // deleted at 9
  ASSERT_FALSE(run.derive.add(history_key("b", {4, 0}), derive_put_record("b4")));
  ASSERT_FALSE(run.derive.add(history_key("c", {5, 1}), derive_put_record("")));  // an empty value: 33 bytes
  ASSERT_EQ(run.latest.size(), 2u);
  EXPECT_EQ(run.latest[0].first, std::string("a\0", 2));
  EXPECT_EQ(run.latest[0].second, derive_put_record("a7").substr(1));
  EXPECT_EQ(run.latest[1].first, "c");
  EXPECT_EQ(run.derive.live_keys(), 2);
}

// A sender's versions oldest first: the oldest would become the key's
// latest. Refused, as is a key going back (across table files nothing
// else sees it: storage/bulk_load.cc checks one file's order).
TEST(LatestFromHistory, PairsOutOfOrderAreRefused) {
  {
    DeriveTestRun run;
    ASSERT_FALSE(run.derive.add(history_key("a", {3, 0}), derive_put_record("old")));
    EXPECT_TRUE(run.derive.add(history_key("a", {7, 0}), derive_put_record("new")));
  }
  {
    DeriveTestRun run;
    ASSERT_FALSE(run.derive.add(history_key("b", {3, 0}), derive_put_record("b")));
    EXPECT_TRUE(run.derive.add(history_key("a", {2, 0}), derive_put_record("a")));
  }
  {
    DeriveTestRun run;  // the same pair twice
    ASSERT_FALSE(run.derive.add(history_key("a", {3, 0}), derive_put_record("a")));
    EXPECT_TRUE(run.derive.add(history_key("a", {3, 0}), derive_put_record("a")));
  }
}

}  // namespace
}  // namespace etcdq::mvcc
