// The member's typed calls the gRPC services translate to (member/kv.h,
// leases.h, watches.h, maintenance.h), over a real apply::StateMachine on
// RocksDB in a temporary directory and a consensus stand-in that applies
// every proposal at once, one entry each, as a one-member log would.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "apply/entry.h"
#include "apply/state_machine.h"
#include "lease/id.h"
#include "member/answers.h"
#include "member/consensus.h"
#include "member/context.h"
#include "member/kv.h"
#include "member/leases.h"
#include "member/maintenance.h"
#include "member/watches.h"
#include "member_test_context.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;

// Applies each proposal when it is made (no queue: these tests are about
// what the calls do with applied state, not about ordering).
class ApplyAtOnceConsensus final : public member::Consensus {
 public:
  explicit ApplyAtOnceConsensus(apply::Applier* applier) : applier_(applier), index_(applier->applied_index()) {}
  void propose(apply::Command cmd, member::CommandDone done) override {
    std::string entry;
    apply::append_framed(&entry, cmd.SerializeAsString());
    apply::pad_entry(&entry);
    std::vector<apply::Result> results;
    Error e = applier_->apply(++index_, entry, &results);
    ASSERT_FALSE(e) << e.message();
    ASSERT_EQ(results.size(), 1u);
    done(std::move(results[0]));
  }
  void read_barrier(std::function<void(Error)> fn) override { fn({}); }
  consensus::Progress progress() override { return {.term = 3, .leader_id = 1, .is_leader = true}; }

 private:
  apply::Applier* applier_;
  uint64_t index_;
};

// A watch stream that keeps every event it is offered.
class CollectingSink final : public member::WatchSink {
 public:
  bool offer(const member::WatchBatch& b) override {
    for (const auto& r : b.events) events.push_back(r.event->event());
    return true;
  }
  size_t room() const override { return SIZE_MAX; }
  std::vector<mvccpb::Event> events;
};

class MemberCalls : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etcdq-member-calls-" + std::to_string(std::random_device{}()));
    ASSERT_FALSE(apply::StateMachine::open(dir_.string(), {}, &sm_));
    consensus_ = std::make_unique<ApplyAtOnceConsensus>(sm_->applier());
    ids_ = std::make_unique<lease::IdGenerator>(0x51);
    testing_member::wire_context(&ctx_, sm_.get(), consensus_.get());
    ctx_.lease_ids = ids_.get();
  }
  void TearDown() override {
    consensus_.reset();
    sm_.reset();
    fs::remove_all(dir_);
  }

  template <class Resp>
  Resp propose_ok(apply::Command cmd) {
    member::Answer<Resp> out;
    member::propose_for<Resp>(ctx_, std::move(cmd), [&out](member::Answer<Resp>&& a) { out = std::move(a); });
    EXPECT_FALSE(out.error) << out.error.message();
    return out.response;
  }
  void put(const std::string& k, const std::string& v, int64_t lease = 0) {
    apply::Command c;
    c.mutable_put()->set_key(k);
    c.mutable_put()->set_value(v);
    c.mutable_put()->set_lease(lease);
    propose_ok<etcdserverpb::PutResponse>(std::move(c));
  }

  fs::path dir_;
  std::unique_ptr<apply::StateMachine> sm_;
  std::unique_ptr<ApplyAtOnceConsensus> consensus_;
  std::unique_ptr<lease::IdGenerator> ids_;
  member::Context ctx_{};
};

TEST_F(MemberCalls, KvValidateRefusesWhatEtcdRefusesBeforeAnythingIsProposed) {
  etcdserverpb::RangeRequest r;
  EXPECT_EQ(member::kv::validate(r).message(), errors::empty_key().message());
  r.set_key("k");
  EXPECT_FALSE(member::kv::validate(r));
  ctx_.limits.max_txn_ops = 1;
  etcdserverpb::TxnRequest t;
  t.add_success()->mutable_request_range()->set_key("a");
  EXPECT_FALSE(member::kv::validate(ctx_, t));
  EXPECT_TRUE(member::kv::is_read_only(t));
  t.add_success()->mutable_request_put()->set_key("b");
  EXPECT_EQ(member::kv::validate(ctx_, t).message(), errors::too_many_ops().message());
  EXPECT_FALSE(member::kv::is_read_only(t));
  etcdserverpb::DeleteRangeRequest d;
  EXPECT_EQ(member::kv::validate(d).message(), errors::empty_key().message());
}

TEST_F(MemberCalls, LeaseTimeToLiveOfUnknownLeaseIsMinusOneAndOfAGrantedOneListsItsKeys) {
  etcdserverpb::LeaseTimeToLiveRequest q;
  q.set_id(12345);
  etcdserverpb::LeaseTimeToLiveResponse resp;
  member::leases::time_to_live(ctx_, q, &resp);
  EXPECT_EQ(resp.ttl(), -1);
  EXPECT_EQ(member::leases::renew(ctx_, 12345), 0);

  int64_t id = member::leases::next_id(ctx_);
  ASSERT_GT(id, 0);
  apply::Command g;
  g.mutable_lease_grant()->set_id(id);
  g.mutable_lease_grant()->set_ttl(60);
  propose_ok<etcdserverpb::LeaseGrantResponse>(std::move(g));
  EXPECT_NE(member::leases::next_id(ctx_), id);
  put("held", "v", id);

  q.set_id(id);
  q.set_keys(true);
  resp.Clear();
  member::leases::time_to_live(ctx_, q, &resp);
  EXPECT_EQ(resp.id(), id);
  EXPECT_EQ(resp.grantedttl(), 60);
  EXPECT_GT(resp.ttl(), 0);
  ASSERT_EQ(resp.keys_size(), 1);
  EXPECT_EQ(resp.keys(0), "held");
  EXPECT_EQ(resp.header().member_id(), 0x51u);
  EXPECT_EQ(member::leases::renew(ctx_, id), 60);
  EXPECT_EQ(member::leases::ids(ctx_), std::vector<int64_t>{id});
}

TEST_F(MemberCalls, WatchCreatedFromTheCurrentRevisionGetsLaterChangesUntilCanceled) {
  put("a", "0");
  CollectingSink sink;
  etcdserverpb::WatchCreateRequest c;
  c.set_key("a");
  int64_t rev = member::watches::revision(ctx_);
  EXPECT_EQ(rev, 2);
  member::WatchSpec spec = member::watches::spec_of(ctx_, c, rev);
  EXPECT_EQ(spec.start_revision, rev + 1);
  EXPECT_EQ(spec.progress_from, 0);
  member::watches::create(ctx_, &sink, 7, c, spec);
  put("a", "1");
  put("b", "x");  // not watched
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].kv().value(), "1");
  EXPECT_EQ(sink.events[0].kv().mod_revision(), 3);
  EXPECT_TRUE(member::watches::cancel(ctx_, &sink, 7));
  EXPECT_FALSE(member::watches::cancel(ctx_, &sink, 7));
  put("a", "2");
  EXPECT_EQ(sink.events.size(), 1u);
  member::watches::close(ctx_, &sink);
}

TEST_F(MemberCalls, WatchSpecTakesTheStartRevisionAndFiltersOfTheCreate) {
  etcdserverpb::WatchCreateRequest c;
  c.set_key("k");
  c.set_range_end("l");
  c.set_start_revision(5);
  c.set_prev_kv(true);
  c.add_filters(etcdserverpb::WatchCreateRequest::NOPUT);
  member::WatchSpec spec = member::watches::spec_of(ctx_, c, 9);
  EXPECT_EQ(spec.key, "k");
  EXPECT_EQ(spec.end, "l");
  EXPECT_EQ(spec.start_revision, 5);
  EXPECT_EQ(spec.progress_from, 5);
  EXPECT_TRUE(spec.prev_kv);
  EXPECT_TRUE(spec.no_put);
  EXPECT_FALSE(spec.no_delete);
}

TEST_F(MemberCalls, HashKvCoversTheAskedRevisionAndRefusesAFutureOne) {
  put("a", "1");
  member::maintenance::KvHash at2;
  ASSERT_FALSE(member::maintenance::hash_kv(ctx_, 0, &at2));
  EXPECT_EQ(at2.revision, 2);
  EXPECT_EQ(at2.hash_revision, 2);
  EXPECT_EQ(at2.compact_revision, -1);  // never compacted, as etcd says
  put("a", "2");
  member::maintenance::KvHash now;
  ASSERT_FALSE(member::maintenance::hash_kv(ctx_, 0, &now));
  EXPECT_EQ(now.revision, 3);
  EXPECT_NE(now.hash, at2.hash);
  member::maintenance::KvHash again;
  ASSERT_FALSE(member::maintenance::hash_kv(ctx_, 2, &again));
  EXPECT_EQ(again.hash_revision, 2);
  EXPECT_EQ(again.hash, at2.hash);
  EXPECT_EQ(member::maintenance::hash_kv(ctx_, 99, &again).message(), errors::future_rev().message());
}

}  // namespace
}  // namespace etcdq
