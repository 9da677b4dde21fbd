// The member's request paths without a log or a network: the proposal
// pipeline (member/pipeline.h), the typed answers (member/answers.h) and the
// read path (member/reads.h), over a fake consensus (member/consensus.h)
// that queues proposals and read barriers until the test lets them through.
// Committed proposals are applied for real, by apply::StateMachine on
// RocksDB in a temporary directory, as the member's applier would.
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "apply/entry.h"
#include "apply/state_machine.h"
#include "member/answers.h"
#include "member/consensus.h"
#include "member/context.h"
#include "member/pipeline.h"
#include "member/reads.h"
#include "member_test_context.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;
using apply::Command;

// Consensus as a queue: propose() and read_barrier() wait until commit()
// or pass_barriers() (or fail_barriers()) lets them through.
class FakeConsensus final : public member::Consensus {
 public:
  explicit FakeConsensus(apply::Applier* applier) : applier_(applier), index_(applier->applied_index()) {}

  void propose(Command cmd, member::CommandDone done) override { proposed_.emplace_back(std::move(cmd), std::move(done)); }
  void read_barrier(std::function<void(Error)> fn) override { barriers_.push_back(std::move(fn)); }
  consensus::Progress progress() override { return progress_; }

  // Applies every queued proposal, one entry each, in order, and answers it.
  void commit() {
    while (!proposed_.empty()) {
      auto [cmd, done] = std::move(proposed_.front());
      proposed_.pop_front();
      std::string entry;
      apply::append_framed(&entry, cmd.SerializeAsString());
      apply::pad_entry(&entry);
      std::vector<apply::Result> results;
      ASSERT_FALSE(applier_->apply(++index_, entry, &results));
      ASSERT_EQ(results.size(), 1u);
      done(std::move(results[0]));
    }
  }
  // Answers the oldest proposal with `r` instead of applying it.
  void answer_first(apply::Result r) {
    auto [cmd, done] = std::move(proposed_.front());
    proposed_.pop_front();
    done(std::move(r));
  }
  void pass_barriers(Error e = {}) {
    auto fns = std::move(barriers_);
    barriers_.clear();
    for (auto& fn : fns) fn(e);
  }

  const std::deque<std::pair<Command, member::CommandDone>>& proposed() const { return proposed_; }
  size_t barriers_waiting() const { return barriers_.size(); }
  consensus::Progress progress_{.term = 7, .leader_id = 1, .is_leader = true};

 private:
  apply::Applier* applier_;
  uint64_t index_;
  std::deque<std::pair<Command, member::CommandDone>> proposed_;
  std::vector<std::function<void(Error)>> barriers_;
};

Command put_command(const std::string& k, const std::string& v) {
  Command c;
  c.mutable_put()->set_key(k);
  c.mutable_put()->set_value(v);
  return c;
}

class MemberPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etcdq-member-paths-" + std::to_string(std::random_device{}()));
    ASSERT_FALSE(apply::StateMachine::open(dir_.string(), {}, &sm_));
    consensus_ = std::make_unique<FakeConsensus>(sm_->applier());
    testing_member::wire_context(&ctx_, sm_.get(), consensus_.get());
  }
  void TearDown() override {
    consensus_.reset();
    sm_.reset();
    fs::remove_all(dir_);
  }

  // Proposes through the pipeline; the answer lands in *out once given.
  template <class Resp>
  void propose(Command cmd, member::Answer<Resp>* out, bool* answered) {
    *answered = false;
    member::propose_for<Resp>(ctx_, std::move(cmd), [out, answered](member::Answer<Resp>&& a) {
      *out = std::move(a);
      *answered = true;
    });
  }
  void put_committed(const std::string& k, const std::string& v) {
    member::Answer<etcdserverpb::PutResponse> a;
    bool answered;
    propose(put_command(k, v), &a, &answered);
    consensus_->commit();
    ASSERT_TRUE(answered);
    ASSERT_FALSE(a.error) << a.error.message();
  }

  fs::path dir_;
  std::unique_ptr<apply::StateMachine> sm_;
  std::unique_ptr<FakeConsensus> consensus_;
  member::Context ctx_{};
};

TEST_F(MemberPaths, AdmittedPutReachesConsensusOnceAndIsAnsweredWithItsHeader) {
  member::Answer<etcdserverpb::PutResponse> a;
  bool answered;
  propose(put_command("k", "v"), &a, &answered);
  EXPECT_FALSE(answered) << "answered before consensus applied it";
  ASSERT_EQ(consensus_->proposed().size(), 1u);
  EXPECT_EQ(consensus_->proposed()[0].first.put().key(), "k");
  consensus_->commit();
  ASSERT_TRUE(answered);
  EXPECT_FALSE(a.error) << a.error.message();
  EXPECT_EQ(a.response.header().revision(), 2);
  EXPECT_EQ(a.response.header().member_id(), 0x51u);
  EXPECT_EQ(a.response.header().cluster_id(), 0xc1u);
  EXPECT_EQ(a.response.header().raft_term(), 7u);
}

TEST_F(MemberPaths, RequestRulesRefuseBeforeConsensus) {
  member::Answer<etcdserverpb::PutResponse> a;
  bool answered;
  propose(put_command("", "v"), &a, &answered);
  ASSERT_TRUE(answered);
  EXPECT_EQ(a.error.message(), errors::empty_key().message());
  EXPECT_TRUE(consensus_->proposed().empty());
}

TEST_F(MemberPaths, TooLargeRequestRefusedBeforeConsensus) {
  ctx_.limits.max_request_bytes = 64;
  member::Answer<etcdserverpb::PutResponse> a;
  bool answered;
  propose(put_command("k", std::string(100, 'x')), &a, &answered);
  ASSERT_TRUE(answered);
  EXPECT_EQ(a.error.message(), errors::request_too_large().message());
  EXPECT_TRUE(consensus_->proposed().empty());
  // Just under: admitted.
  propose(put_command("k", "v"), &a, &answered);
  EXPECT_FALSE(answered);
  EXPECT_EQ(consensus_->proposed().size(), 1u);
}

TEST_F(MemberPaths, QuotaExceededRaisesNoSpaceThroughConsensusAndRefusesOnlyWhatAddsData) {
  ctx_.limits.quota_bytes = 1;
  member::Answer<etcdserverpb::PutResponse> a;
  bool answered;
  propose(put_command("k", "v"), &a, &answered);
  ASSERT_TRUE(answered);
  EXPECT_EQ(a.error.message(), errors::no_space().message());
  // The alarm, not the put, went to consensus, as an internal command.
  ASSERT_EQ(consensus_->proposed().size(), 1u);
  const Command& raise = consensus_->proposed()[0].first;
  EXPECT_TRUE(raise.internal());
  EXPECT_EQ(raise.alarm().alarm(), etcdserverpb::NOSPACE);
  EXPECT_EQ(raise.alarm().memberid(), 0x51u);
  consensus_->commit();
  EXPECT_TRUE(ctx_.alarms->active(etcdserverpb::NOSPACE));
  // With the alarm up a delete still passes (etcd's quota counts only puts,
  // lease grants and txns with a put).
  Command del;
  del.mutable_delete_range()->set_key("k");
  member::Answer<etcdserverpb::DeleteRangeResponse> d;
  propose(std::move(del), &d, &answered);
  EXPECT_FALSE(answered);
  consensus_->commit();
  ASSERT_TRUE(answered);
  EXPECT_FALSE(d.error) << d.error.message();
}

TEST_F(MemberPaths, ForwardedCommandsSkipTheQuotaButNotTheRequestRules) {
  ctx_.limits.quota_bytes = 1;
  EXPECT_FALSE(member::admit(ctx_, put_command("k", "v"), member::Source::kForwarded));
  EXPECT_EQ(member::admit(ctx_, put_command("", "v"), member::Source::kForwarded).message(), errors::empty_key().message());
}

TEST_F(MemberPaths, AnApplyResultOfTheWrongTypeIsAnInternalError) {
  member::Answer<etcdserverpb::PutResponse> a;
  bool answered;
  propose(put_command("k", "v"), &a, &answered);
  apply::Result wrong;
  wrong.response = etcdserverpb::DeleteRangeResponse();
  consensus_->answer_first(std::move(wrong));
  ASSERT_TRUE(answered);
  EXPECT_EQ(a.error.code(), Code::kInternal);
  EXPECT_EQ(a.error.message(), "apply returned the wrong response");
}

TEST_F(MemberPaths, ConsensusErrorsReachTheCallerWithoutAHeader) {
  member::Answer<etcdserverpb::PutResponse> a;
  bool answered;
  propose(put_command("k", "v"), &a, &answered);
  apply::Result failed;
  failed.error = errors::stopped();
  consensus_->answer_first(std::move(failed));
  ASSERT_TRUE(answered);
  EXPECT_EQ(a.error.message(), errors::stopped().message());
  EXPECT_FALSE(a.response.has_header());
}

TEST_F(MemberPaths, SerializableReadServesAtOnceWithoutABarrier) {
  put_committed("a", "1");
  etcdserverpb::RangeRequest req;
  req.set_key("a");
  req.set_serializable(true);
  etcdserverpb::RangeResponse resp;
  bool done = false;
  member::range(ctx_, member::read_mode(req), &req, &resp, {}, [&done](Error e) {
    EXPECT_FALSE(e);
    done = true;
  });
  EXPECT_TRUE(done);
  EXPECT_EQ(consensus_->barriers_waiting(), 0u);
  ASSERT_EQ(resp.kvs_size(), 1);
  EXPECT_EQ(resp.kvs(0).value(), "1");
  EXPECT_EQ(resp.header().revision(), 2);
  EXPECT_EQ(resp.header().member_id(), 0x51u);
}

TEST_F(MemberPaths, LinearizableReadWaitsForTheBarrierThenChecksThenReadsTheNewestState) {
  put_committed("a", "1");
  etcdserverpb::RangeRequest req;
  req.set_key("a");
  etcdserverpb::RangeResponse resp;
  std::vector<std::string> order;
  member::range(
      ctx_, member::read_mode(req), &req, &resp,
      [&order] {
        order.push_back("check");
        return Error();
      },
      [&order](Error e) {
        EXPECT_FALSE(e);
        order.push_back("done");
      });
  EXPECT_TRUE(order.empty()) << "served before the barrier";
  EXPECT_EQ(consensus_->barriers_waiting(), 1u);
  // A write applied while the read waits is seen: the view is taken after.
  put_committed("a", "2");
  consensus_->pass_barriers();
  EXPECT_EQ(order, (std::vector<std::string>{"check", "done"}));
  ASSERT_EQ(resp.kvs_size(), 1);
  EXPECT_EQ(resp.kvs(0).value(), "2");
}

TEST_F(MemberPaths, BarrierErrorEndsTheReadBeforeTheCheck) {
  etcdserverpb::RangeRequest req;
  req.set_key("a");
  etcdserverpb::RangeResponse resp;
  bool checked = false;
  Error got;
  member::range(
      ctx_, member::ReadMode::kLinearizable, &req, &resp,
      [&checked] {
        checked = true;
        return Error();
      },
      [&got](Error e) { got = e; });
  consensus_->pass_barriers(errors::no_leader());
  EXPECT_FALSE(checked);
  EXPECT_EQ(got.message(), errors::no_leader().message());
}

TEST_F(MemberPaths, RefusedCheckEndsTheReadUnread) {
  put_committed("a", "1");
  etcdserverpb::RangeRequest req;
  req.set_key("a");
  req.set_serializable(true);
  etcdserverpb::RangeResponse resp;
  Error got;
  member::range(ctx_, member::read_mode(req), &req, &resp, [] { return errors::permission_denied(); },
                [&got](Error e) { got = e; });
  EXPECT_EQ(got.message(), errors::permission_denied().message());
  EXPECT_EQ(resp.kvs_size(), 0);
}

TEST_F(MemberPaths, ReadOnlyTxnIsSerializableOnlyWhenEveryRangeInItIs) {
  etcdserverpb::TxnRequest t;
  auto* r = t.add_success()->mutable_request_range();
  r->set_key("a");
  r->set_serializable(true);
  EXPECT_EQ(member::read_mode(t), member::ReadMode::kSerializable);
  auto* nested = t.add_failure()->mutable_request_txn()->add_success()->mutable_request_range();
  nested->set_key("b");
  EXPECT_EQ(member::read_mode(t), member::ReadMode::kLinearizable);
  nested->set_serializable(true);
  EXPECT_EQ(member::read_mode(t), member::ReadMode::kSerializable);
}

TEST_F(MemberPaths, ReadOnlyTxnReadsThroughTheSamePath) {
  put_committed("a", "1");
  etcdserverpb::TxnRequest t;
  t.add_success()->mutable_request_range()->set_key("a");
  etcdserverpb::TxnResponse resp;
  bool done = false;
  member::read_txn(ctx_, member::read_mode(t), &t, &resp, {}, [&done](Error e) {
    EXPECT_FALSE(e);
    done = true;
  });
  EXPECT_FALSE(done);
  consensus_->pass_barriers();
  ASSERT_TRUE(done);
  EXPECT_TRUE(resp.succeeded());
  ASSERT_EQ(resp.responses_size(), 1);
  EXPECT_EQ(resp.responses(0).response_range().kvs(0).value(), "1");
  EXPECT_EQ(resp.header().raft_term(), 7u);
}

}  // namespace
}  // namespace etcdq
