// The corruption checks compare hashes by etcd 3.6's rules
// (member/corruption_check.h; etcd's server/etcdserver/corrupt.go
// InitialCheck and PeriodicCheck), and believe no peer answer that does not
// add up.
#include "member/corruption_check.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace etcdq::member {
namespace {

constexpr uint64_t kSelf = 0x1;
constexpr uint64_t kPeerA = 0xa;
constexpr uint64_t kPeerB = 0xb;
constexpr uint64_t kCluster = 0xc1;

PeerHash answered(uint64_t id, uint32_t hash, int64_t revision, int64_t compact, int64_t current = -1) {
  PeerHash p;
  p.id = id;
  p.address = "127.0.0.1:1";
  p.ok = true;
  p.hash = {hash, revision, compact};
  p.current_revision = current < 0 ? revision : current;
  return p;
}

PeerHash failed(uint64_t id, Error e) {
  PeerHash p;
  p.id = id;
  p.error = std::move(e);
  return p;
}

peer::HashKVResponse answer(uint64_t member, uint64_t cluster, int64_t hashed, int64_t compact, int64_t current) {
  peer::HashKVResponse r;
  r.set_member_id(member);
  r.set_cluster_id(cluster);
  r.set_hash_revision(hashed);
  r.set_compact_revision(compact);
  r.set_revision(current);
  r.set_hash(42);
  return r;
}

// ---- what a peer says is checked first ----

TEST(PeerHashAnswer, AConsistentAnswerFromTheMemberAskedIsBelieved) {
  EXPECT_FALSE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, kCluster, 10, 0, 10)));
  EXPECT_FALSE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, kCluster, 10, 9, 25)));
  // A store never compacted says -1, as etcd's.
  EXPECT_FALSE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, kCluster, 10, -1, 10)));
}

TEST(PeerHashAnswer, AnAnswerThatDoesNotAddUpIsRefused) {
  // Another member answered at that address.
  EXPECT_EQ(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerB, kCluster, 10, 0, 10)).code(),
            Code::kInvalidArgument);
  // Another cluster.
  EXPECT_TRUE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, 0xbad, 10, 0, 10)));
  // Not the revision asked.
  EXPECT_TRUE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, kCluster, 11, 0, 11)));
  // A hash at or below the compaction cannot be, nor one past the current revision.
  EXPECT_TRUE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, kCluster, 10, 10, 12)));
  EXPECT_TRUE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, kCluster, 10, -2, 12)));
  EXPECT_TRUE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, kCluster, 10, 0, 9)));
  EXPECT_NE(check_peer_answer(kPeerA, kCluster, 10, answer(kPeerA, kCluster, 10, 0, 9)).message().find(
                "malformed hash answer"),
            std::string::npos);
}

// ---- the initial check ----

TEST(InitialCheckRules, OnlyADifferentHashAtTheSameCompactRevisionIsAMismatch) {
  KvHash local{100, 20, 5};
  EXPECT_EQ(initial_verdict(local, answered(kPeerA, 100, 20, 5)), InitialVerdict::kMatch);
  EXPECT_EQ(initial_verdict(local, answered(kPeerA, 101, 20, 5)), InitialVerdict::kMismatch);
  EXPECT_EQ(initial_verdict(local, answered(kPeerA, 101, 20, 7)), InitialVerdict::kCompactDiffers);
}

TEST(InitialCheckRules, PeersThatCannotHashTheRevisionAreSkippedByWhy) {
  KvHash local{100, 20, 5};
  EXPECT_EQ(initial_verdict(local, failed(kPeerA, errors::future_rev())), InitialVerdict::kPeerBehind);
  EXPECT_EQ(initial_verdict(local, failed(kPeerA, errors::compacted())), InitialVerdict::kLocalBehind);
  EXPECT_EQ(initial_verdict(local, failed(kPeerA, Error(Code::kFailedPrecondition, kClusterIdMismatch))),
            InitialVerdict::kClusterMismatch);
  EXPECT_EQ(initial_verdict(local, failed(kPeerA, Error(Code::kUnavailable, "failed to connect"))),
            InitialVerdict::kNoAnswer);
}

CorruptionChecker::Hooks hooks(KvHash local, std::vector<PeerHash> peers, std::vector<uint64_t>* raised,
                               std::vector<int64_t>* asked_at = nullptr) {
  CorruptionChecker::Hooks h;
  h.self = kSelf;
  h.local_hash = [local](KvHash* out) {
    *out = local;
    return Error();
  };
  h.peer_hashes = [peers, asked_at](int64_t rev) {
    if (asked_at) asked_at->push_back(rev);
    return peers;
  };
  h.linearizable_read = [] { return Error(); };
  h.raise_corrupt = [raised](uint64_t id) { raised->push_back(id); };
  return h;
}

TEST(InitialCheck, FailsWithEtcdsWordsWhenAnyPeerMismatchesAndAsksAtTheLocalRevision) {
  std::vector<uint64_t> raised;
  std::vector<int64_t> asked;
  CorruptionChecker c(hooks({100, 20, 5},
                            {answered(kPeerA, 100, 20, 5), answered(kPeerB, 666, 20, 5)}, &raised, &asked));
  Error e = c.initial_check();
  ASSERT_TRUE(e);
  EXPECT_EQ(e.message(), "1 found data inconsistency with peers");
  EXPECT_EQ(asked, std::vector<int64_t>{20});
  EXPECT_TRUE(raised.empty()) << "the initial check refuses to start; it raises no alarm";
}

TEST(InitialCheck, PassesWhenNothingComparableDiffers) {
  std::vector<uint64_t> raised;
  CorruptionChecker c(hooks({100, 20, 5},
                            {answered(kPeerA, 666, 20, 6), failed(kPeerB, errors::future_rev())}, &raised));
  EXPECT_FALSE(c.initial_check());
  CorruptionChecker alone(hooks({100, 20, 5}, {}, &raised));
  EXPECT_FALSE(alone.initial_check());
}

TEST(InitialCheck, ALocalHashErrorStopsTheStartNamingTheMember) {
  std::vector<uint64_t> raised;
  auto h = hooks({}, {}, &raised);
  h.local_hash = [](KvHash*) { return Error(Code::kInternal, "mvcc: no readable record"); };
  CorruptionChecker c(h);
  Error e = c.initial_check();
  ASSERT_TRUE(e);
  EXPECT_EQ(e.message(), "1 failed to fetch hash (mvcc: no readable record)");
}

// ---- the leader's periodic check ----

TEST(PeriodicCheckRules, AgreeingFollowersRaiseNothing) {
  std::vector<std::string> why;
  KvHash h{100, 20, 5};
  auto alarms = periodic_verdicts(kSelf, h, {200, 25, 5}, 25,
                                  {answered(kPeerA, 100, 20, 5, 24), failed(kPeerB, errors::future_rev())}, &why);
  EXPECT_TRUE(alarms.empty());
  EXPECT_TRUE(why.empty());
}

TEST(PeriodicCheckRules, AFollowerWithAnotherHashAtTheSameCompactRevisionIsAlarmed) {
  std::vector<std::string> why;
  KvHash h{100, 20, 5};
  auto alarms = periodic_verdicts(kSelf, h, h, 20, {answered(kPeerA, 100, 20, 5), answered(kPeerB, 7, 20, 5)}, &why);
  EXPECT_EQ(alarms, std::vector<uint64_t>{kPeerB});
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("same compact revision then hashes must match"), std::string::npos);
}

TEST(PeriodicCheckRules, AFollowerWithAnotherCompactRevisionIsNotComparedByHash) {
  std::vector<std::string> why;
  KvHash h{100, 20, 5};
  EXPECT_TRUE(periodic_verdicts(kSelf, h, h, 20, {answered(kPeerA, 7, 20, 4)}, &why).empty());
}

TEST(PeriodicCheckRules, AFollowerAheadOfTheLeaderIsAlarmed) {
  std::vector<std::string> why;
  KvHash h{100, 20, 5};
  // Its revision past the leader's after the read barrier.
  EXPECT_EQ(periodic_verdicts(kSelf, h, h, 20, {answered(kPeerA, 100, 20, 5, 21)}, &why),
            std::vector<uint64_t>{kPeerA});
  // Its compaction past the leader's.
  why.clear();
  EXPECT_EQ(periodic_verdicts(kSelf, h, h, 20, {answered(kPeerA, 100, 20, 6)}, &why), std::vector<uint64_t>{kPeerA});
  EXPECT_NE(why[0].find("compact revision from follower must be less than or equal to leader's"), std::string::npos);
}

TEST(PeriodicCheckRules, TheLeadersOwnHashChangingAtTheSameRevisionAlarmsItself) {
  std::vector<std::string> why;
  EXPECT_EQ(periodic_verdicts(kSelf, {100, 20, 5}, {101, 20, 5}, 20, {}, &why), std::vector<uint64_t>{kSelf});
  // A write in between (another revision) is not a change of the same state.
  why.clear();
  EXPECT_TRUE(periodic_verdicts(kSelf, {100, 20, 5}, {101, 21, 5}, 21, {}, &why).empty());
}

TEST(PeriodicCheckRules, OneAlarmAPassButEveryViolationLogged) {
  std::vector<std::string> why;
  KvHash h{100, 20, 5};
  auto alarms = periodic_verdicts(kSelf, h, {101, 20, 5}, 20,
                                  {answered(kPeerA, 7, 20, 5), answered(kPeerB, 8, 20, 5, 30)}, &why);
  EXPECT_EQ(alarms, std::vector<uint64_t>{kSelf});
  EXPECT_EQ(why.size(), 4u);
}

TEST(PeriodicCheck, RaisesCorruptForTheMismatchedFollowerThroughTheHook) {
  std::vector<uint64_t> raised;
  CorruptionChecker c(hooks({100, 20, 5}, {answered(kPeerA, 100, 20, 5), answered(kPeerB, 9, 20, 5)}, &raised));
  EXPECT_FALSE(c.periodic_check());
  EXPECT_EQ(raised, std::vector<uint64_t>{kPeerB});
}

TEST(PeriodicCheck, NoAlarmWhenLeadershipCannotBeConfirmed) {
  std::vector<uint64_t> raised;
  auto h = hooks({100, 20, 5}, {answered(kPeerB, 9, 20, 5)}, &raised);
  h.linearizable_read = [] { return errors::not_leader(); };
  CorruptionChecker c(h);
  EXPECT_EQ(c.periodic_check(), errors::not_leader());
  EXPECT_TRUE(raised.empty());
}

TEST(PeriodicCheck, RunsOnlyWhileLeading) {
  std::mutex mu;
  std::vector<uint64_t> raised;
  auto h = hooks({100, 20, 5}, {answered(kPeerB, 9, 20, 5)}, &raised);
  h.raise_corrupt = [&mu, &raised](uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    raised.push_back(id);
  };
  CorruptionChecker c(h);
  c.start(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(raised.empty());
  }
  c.set_leading(true);
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!raised.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  c.stop();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(raised.empty());
  EXPECT_EQ(raised[0], kPeerB);
}

}  // namespace
}  // namespace etcdq::member
