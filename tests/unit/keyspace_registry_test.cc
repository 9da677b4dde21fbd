// The key-space registry (keyspace/registry.h) with the plug-ins etcdq
// registers (member/member.h, add_key_spaces): the queues own /q/ and
// /queue/ keys and nothing else, their rules reach validation, permission
// ranges and command checks through the registry, and a second
// registration changes nothing.
//
// This file also registers them for the whole unit-test binary, before any
// test runs, as Member::open does in etcdq: every StateMachine the tests
// open has the queues' layer, as every member's has.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "apply/command_check.h"
#include "apply/validate.h"
#include "keyspace/registry.h"
#include "member/member.h"

namespace etcdq {
namespace {

const bool kRegistered = (member::add_key_spaces(), true);

etcdserverpb::PutRequest put(const std::string& key, const std::string& value = "") {
  etcdserverpb::PutRequest r;
  r.set_key(key);
  r.set_value(value);
  return r;
}

TEST(KeySpaceRegistry, QueuesOwnTheirPrefixesAndNothingElse) {
  ASSERT_TRUE(kRegistered);
  ASSERT_EQ(keyspace::kinds().size(), 1u);
  const keyspace::Kind* q = keyspace::owner("/q/jobs/p/t");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->name(), "queue");
  EXPECT_EQ(keyspace::owner("/queue/jobs/p/t"), q);
  EXPECT_EQ(keyspace::owner("/qq/jobs"), nullptr);
  EXPECT_EQ(keyspace::owner("a"), nullptr);
}

TEST(KeySpaceRegistry, ASecondRegistrationAddsNoKind) {
  member::add_key_spaces();
  EXPECT_EQ(keyspace::kinds().size(), 1u);
}

TEST(KeySpaceRegistry, PutValidationReachesTheQueueRules) {
  EXPECT_FALSE(apply::validate_put(put("/q/jobs/p/t", "x")));
  EXPECT_FALSE(apply::validate_put(put("/plain", "x")));
  Error e = apply::validate_put(put("/q/jobs/other", "x"));
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_EQ(e.message(),
            "etcdq: malformed queue key \"/q/jobs/other\": produce with /q/{queue}/p/{tail} or set "
            "/q/{queue}/config (etcdq README, \"Work queues\")");
}

TEST(KeySpaceRegistry, ReadsOfTheAliasNameTheStoredRangeAndPlainRangesStay) {
  std::string k = "/queue/jobs/", e = "/queue/jobs0";
  keyspace::read_range(&k, &e);
  EXPECT_EQ(k, "/q/jobs/");
  EXPECT_EQ(e, "/q/jobs0");
  std::string pk = "a", pe = "b";
  keyspace::read_range(&pk, &pe);
  keyspace::delete_range(&pk, &pe);
  EXPECT_EQ(pk, "a");
  EXPECT_EQ(pe, "b");
}

TEST(KeySpaceRegistry, AProduceTouchesEveryMessageOfItsQueueAndAPlainKeyNothing) {
  std::vector<keyspace::Range> t = keyspace::touches("/q/jobs/p/t", "", /*write=*/true);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].first, "/q/jobs/00000000000000000000");
  EXPECT_TRUE(keyspace::touches("a", "", true).empty());
  EXPECT_TRUE(keyspace::touches("/q/jobs/p/t", "", /*write=*/false).empty());
}

TEST(KeySpaceRegistry, AForwardedQueueAssignmentIsRefusedAsTheLeadersOwn) {
  apply::Command c;
  c.mutable_queue_assign()->set_queue("jobs");
  EXPECT_NE(keyspace::command_owner(c), nullptr);
  EXPECT_FALSE(apply::check_command(c, {}, /*forwarded=*/false));
  Error e = apply::check_command(c, {}, /*forwarded=*/true);
  EXPECT_EQ(e.message(), "etcdserver: malformed command: queue assignments are the leader's own");
  c.mutable_queue_assign()->clear_queue();
  EXPECT_EQ(apply::check_command(c, {}, false).message(),
            "etcdserver: malformed command: queue assignment without a queue");
  EXPECT_EQ(apply::check_command(apply::Command(), {}, false).message(), "etcdserver: malformed command: no request");
}

}  // namespace
}  // namespace etcdq
