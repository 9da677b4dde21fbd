// server/call_rules.h: etcd's interceptor refusals (learner, "hasleader"),
// decided from the member's role and the call's metadata. That every client
// method passes them is checked where the services are installed
// (ClientServer::start, ruled_service.h) and walked method by method against
// etcd 3.6 in tests/cluster/test_call_rules_etcd36.py.
#include "server/call_rules.h"

#include <gtest/gtest.h>

#include <map>

#include "server/request_parsing.h"

namespace etcdq::server {
namespace {

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

TEST(CallRules, LearnerRefusesWhatItDoesNotServe) {
  MemberRole learner{true, true};
  EXPECT_EQ(call_refusal(learner, {}, /*learner_ok=*/false).message(), "etcdserver: rpc not supported for learner");
  EXPECT_TRUE(call_refusal(learner, {}, /*learner_ok=*/true).ok());
  EXPECT_TRUE(call_refusal(MemberRole{false, true}, {}, false).ok());
}

TEST(CallRules, HasLeaderRefusedOnlyWithoutLeaderAndOnlyWhenAsked) {
  Metadata asks{{"hasleader", "true"}};
  Metadata other{{"hasleader", "false"}, {"token", "x"}};
  MemberRole leaderless{false, false};
  EXPECT_EQ(call_refusal(leaderless, asks, false).message(), "etcdserver: no leader");
  EXPECT_EQ(call_refusal(leaderless, asks, true).message(), "etcdserver: no leader");
  EXPECT_TRUE(call_refusal(leaderless, other, false).ok());
  EXPECT_TRUE(call_refusal(leaderless, {}, false).ok());
  EXPECT_TRUE(call_refusal(MemberRole{false, true}, asks, false).ok());
}

TEST(CallRules, LearnerRefusalComesBeforeNoLeader) {
  Metadata asks{{"hasleader", "true"}};
  EXPECT_EQ(call_refusal(MemberRole{true, false}, asks, false).message(), "etcdserver: rpc not supported for learner");
  // A call a learner serves still needs a leader when it asks for one.
  EXPECT_EQ(call_refusal(MemberRole{true, false}, asks, true).message(), "etcdserver: no leader");
}

TEST(CallRules, LearnerServesStatusAndSerializableRangeOnly) {
  etcdserverpb::RangeRequest range;
  EXPECT_FALSE(learner_serves(range));
  range.set_serializable(true);
  EXPECT_TRUE(learner_serves(range));
  EXPECT_TRUE(learner_serves(etcdserverpb::StatusRequest()));
  EXPECT_FALSE(learner_serves(etcdserverpb::PutRequest()));
  EXPECT_FALSE(learner_serves(etcdserverpb::MemberListRequest()));
}

TEST(CallRules, ServiceMethodsComeFromTheDescriptors) {
  auto kv = service_method_names("etcdserverpb.KV");
  EXPECT_EQ(kv, (std::vector<std::string>{"Range", "Put", "DeleteRange", "Txn", "Compact"}));
  EXPECT_EQ(service_method_names("etcdserverpb.Watch"), (std::vector<std::string>{"Watch"}));
  EXPECT_TRUE(service_method_names("no.Such").empty());
}

}  // namespace
}  // namespace etcdq::server
