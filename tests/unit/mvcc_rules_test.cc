// The MVCC rules of etcd's data model, checked through the real apply path
// (log entry bytes -> Applier -> RocksDB) on a temporary database.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "apply/entry.h"
#include "apply/kv.h"
#include "apply/state_machine.h"
#include "etcdq/command.pb.h"
#include "mvcc/codec.h"
#include "mvcc/compactor.h"
#include "mvcc/store.h"
#include "storage/engine.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;
using etcdserverpb::RangeRequest;
using etcdserverpb::RangeResponse;

class MvccRules : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etcdq-mvcc-" + std::to_string(std::random_device{}()));
    open();
  }
  void TearDown() override {
    close();
    fs::remove_all(dir_);
  }
  void open() {
    ASSERT_FALSE(apply::StateMachine::open(dir_.string(), {}, &state_));
    engine_ = state_->engine();
    store_ = state_->store();
    lessor_ = state_->lessor();
    applier_ = state_->applier();
    index_ = applier_->applied_index();
  }
  void close() { state_.reset(); }

  // Applies one entry holding `cmds`; returns their results.
  std::vector<apply::Result> apply(std::vector<apply::Command> cmds) {
    std::string entry;
    for (auto& c : cmds) apply::append_framed(&entry, c.SerializeAsString());
    apply::pad_entry(&entry);
    std::vector<apply::Result> results;
    EXPECT_FALSE(applier_->apply(++index_, entry, &results));
    return results;
  }
  apply::Result one(apply::Command c) { return apply({std::move(c)}).at(0); }

  static apply::Command put(const std::string& k, const std::string& v) {
    apply::Command c;
    c.mutable_put()->set_key(k);
    c.mutable_put()->set_value(v);
    return c;
  }
  static apply::Command del(const std::string& k, const std::string& end = "") {
    apply::Command c;
    c.mutable_delete_range()->set_key(k);
    c.mutable_delete_range()->set_range_end(end);
    return c;
  }
  static apply::Command compact(int64_t rev) {
    apply::Command c;
    c.mutable_compaction()->set_revision(rev);
    return c;
  }

  RangeResponse get(const std::string& k, int64_t rev = 0, const std::string& end = "") {
    RangeRequest r;
    r.set_key(k);
    r.set_range_end(end);
    r.set_revision(rev);
    RangeResponse resp;
    auto view = store_->view();
    apply::ViewState s(*view);
    last_error_ = apply::range(s, r, &resp);
    return resp;
  }
  int64_t revision() { return store_->view()->revision(); }

  fs::path dir_;
  std::unique_ptr<apply::StateMachine> state_;
  storage::Engine* engine_ = nullptr;
  mvcc::Store* store_ = nullptr;
  lease::Lessor* lessor_ = nullptr;
  apply::Applier* applier_ = nullptr;
  uint64_t index_ = 0;
  Error last_error_;
};

TEST_F(MvccRules, EmptyStoreStartsAtRevisionOne) { EXPECT_EQ(revision(), 1); }

TEST_F(MvccRules, EachChangingWriteAdvancesTheRevisionByOne) {
  auto r = one(put("a", "1"));
  EXPECT_EQ(std::get<etcdserverpb::PutResponse>(r.response).header().revision(), 2);
  one(put("b", "1"));
  one(put("a", "2"));
  EXPECT_EQ(revision(), 4);
}

TEST_F(MvccRules, DeleteOfMissingKeyDoesNotAdvanceTheRevision) {
  one(put("a", "1"));
  auto r = one(del("zzz"));
  EXPECT_EQ(std::get<etcdserverpb::DeleteRangeResponse>(r.response).deleted(), 0);
  EXPECT_EQ(revision(), 2);
}

TEST_F(MvccRules, VersionCountsPutsAndResetsOnDelete) {
  one(put("a", "1"));
  one(put("a", "2"));
  auto kv = get("a").kvs(0);
  EXPECT_EQ(kv.version(), 2);
  EXPECT_EQ(kv.create_revision(), 2);
  EXPECT_EQ(kv.mod_revision(), 3);
  one(del("a"));
  EXPECT_EQ(get("a").kvs_size(), 0);
  one(put("a", "3"));
  kv = get("a").kvs(0);
  EXPECT_EQ(kv.version(), 1);
  EXPECT_EQ(kv.create_revision(), 5);
}

TEST_F(MvccRules, TxnWritesShareOneMainRevisionWithIncreasingSubRevisions) {
  apply::Command c;
  auto* t = c.mutable_txn();
  for (auto k : {"x", "y", "z"}) {
    auto* p = t->add_success()->mutable_request_put();
    p->set_key(k);
    p->set_value("v");
  }
  auto r = one(c);
  ASSERT_FALSE(r.error);
  EXPECT_EQ(std::get<etcdserverpb::TxnResponse>(r.response).header().revision(), 2);
  EXPECT_EQ(revision(), 2);
  for (auto k : {"x", "y", "z"}) EXPECT_EQ(get(k).kvs(0).mod_revision(), 2);
  // Sub-revisions 0, 1, 2 in op order, in the revision-ordered log.
  storage::Iterator it = engine_->iterator(storage::Cf::kRevlog);
  std::vector<std::pair<mvcc::Revision, std::string>> seen;
  for (it.seek_to_first(); it.valid(); it.next()) {
    seen.emplace_back(mvcc::decode_revlog_key(it.key()), std::string(it.value().substr(1)));
  }
  ASSERT_EQ(seen.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].first.main, 2);
    EXPECT_EQ(seen[i].first.sub, i);
  }
  EXPECT_EQ(seen[2].second, "z");
}

TEST_F(MvccRules, DeleteRangeRemovesEveryKeyInOneRevision) {
  one(put("d/1", "a"));
  one(put("d/2", "b"));
  one(put("e", "c"));
  auto r = one(del("d/", "d0"));
  EXPECT_EQ(std::get<etcdserverpb::DeleteRangeResponse>(r.response).deleted(), 2);
  EXPECT_EQ(revision(), 5);
  EXPECT_EQ(get("d/", 0, "d0").count(), 0);
  EXPECT_EQ(get("e").count(), 1);
}

TEST_F(MvccRules, RangeAtAnOldRevisionSeesThatRevision) {
  one(put("a", "1"));  // 2
  one(put("a", "2"));  // 3
  one(del("a"));       // 4
  one(put("b", "1"));  // 5
  EXPECT_EQ(get("a", 2).kvs(0).value(), "1");
  EXPECT_EQ(get("a", 3).kvs(0).value(), "2");
  EXPECT_EQ(get("a", 4).kvs_size(), 0);
  auto all = get("\0", 3, std::string(1, '\0'));
  ASSERT_EQ(all.kvs_size(), 1);
  EXPECT_EQ(all.header().revision(), 5);  // etcd answers with the current revision
  EXPECT_EQ(get("\0", 5, std::string(1, '\0')).kvs_size(), 1);
}

TEST_F(MvccRules, FutureAndCompactedRevisionsAreRefused) {
  one(put("a", "1"));
  one(put("a", "2"));
  get("a", 10);
  EXPECT_EQ(last_error_, errors::future_rev());
  ASSERT_FALSE(one(compact(3)).error);
  get("a", 2);
  EXPECT_EQ(last_error_, errors::compacted());
  get("a", 3);
  EXPECT_FALSE(last_error_);
  EXPECT_EQ(one(compact(3)).error, errors::compacted());
  EXPECT_EQ(one(compact(9)).error, errors::future_rev());
}

TEST_F(MvccRules, CompactionKeepsTheNewestVersionOfEachLiveKeyAndDropsTheRest) {
  one(put("a", "1"));  // 2
  one(put("a", "2"));  // 3
  one(put("b", "1"));  // 4
  one(del("b"));       // 5
  one(put("c", "1"));  // 6
  one(put("a", "3"));  // 7
  ASSERT_FALSE(one(compact(6)).error);
  bool done = false;
  std::mutex mu;
  std::condition_variable cv;
  store_->compactor().when_finished(6, [&](bool) {
    std::lock_guard<std::mutex> l(mu);
    done = true;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return done; }));
  }
  // Reads at and above the compaction revision are unchanged.
  EXPECT_EQ(get("a", 6).kvs(0).value(), "2");
  EXPECT_EQ(get("a", 7).kvs(0).value(), "3");
  EXPECT_EQ(get("c", 6).kvs(0).value(), "1");
  EXPECT_EQ(get("b", 6).kvs_size(), 0);
  // Physically: a@3, c@6 and a@7 remain; a@2 and both versions of b are gone.
  storage::Iterator it = engine_->iterator(storage::Cf::kHistory);
  std::vector<std::string> left;
  for (it.seek_to_first(); it.valid(); it.next()) {
    std::string k;
    mvcc::Revision r;
    ASSERT_TRUE(mvcc::decode_history_key(it.key(), &k, &r));
    left.push_back(k + "@" + std::to_string(r.main));
  }
  EXPECT_EQ(left, (std::vector<std::string>{"a@7", "a@3", "c@6"}));
  EXPECT_EQ(revision(), 7);  // compaction does not advance the revision
}

TEST_F(MvccRules, ReappliedEntriesAfterRestartAreSkipped) {
  one(put("a", "1"));
  one(put("a", "2"));
  uint64_t applied = applier_->applied_index();
  close();
  open();
  EXPECT_EQ(applier_->applied_index(), applied);
  // The log replays entry `applied` again: nothing changes.
  std::string entry;
  apply::append_framed(&entry, put("a", "again").SerializeAsString());
  apply::pad_entry(&entry);
  std::vector<apply::Result> results;
  ASSERT_FALSE(applier_->apply(applied, entry, &results));
  EXPECT_TRUE(results.empty());
  EXPECT_EQ(get("a").kvs(0).value(), "2");
  EXPECT_EQ(revision(), 3);
}

TEST_F(MvccRules, CommandsInOneEntrySeeEachOthersWrites) {
  auto rs = apply({put("a", "1"), put("a", "2"), del("a"), put("a", "3")});
  ASSERT_EQ(rs.size(), 4u);
  auto kv = get("a").kvs(0);
  EXPECT_EQ(kv.version(), 1);
  EXPECT_EQ(kv.create_revision(), 5);
  EXPECT_EQ(revision(), 5);
}

// history and revlog writes skip the batch's index (storage/batch.h); a
// range at a revision an earlier command of the same entry wrote must still
// see it, and so must a delete's tombstone at a later one.
TEST_F(MvccRules, TxnInOneEntryReadsRevisionsWrittenEarlierInIt) {
  one(put("a", "0"));  // 2, in the database before the entry
  auto txn = [](int64_t rev) {
    apply::Command c;
    auto* r = c.mutable_txn()->add_success()->mutable_request_range();
    r->set_key("\0");
    r->set_range_end(std::string(1, '\0'));
    r->set_revision(rev);
    return c;
  };
  auto rs = apply({put("a", "1"), put("b", "1"), put("a", "2"), del("b"), txn(2), txn(3), txn(4), txn(5), txn(6)});
  ASSERT_EQ(rs.size(), 9u);
  auto values = [&](size_t i) {
    std::string out;
    const auto& t = std::get<etcdserverpb::TxnResponse>(rs.at(i).response);
    for (const auto& kv : t.responses(0).response_range().kvs()) {
      out += kv.key() + "=" + kv.value() + "@" + std::to_string(kv.mod_revision()) + " ";
    }
    return out;
  };
  for (size_t i = 4; i < 9; ++i) ASSERT_FALSE(rs.at(i).error) << i;
  EXPECT_EQ(values(4), "a=0@2 ");
  EXPECT_EQ(values(5), "a=1@3 ");
  EXPECT_EQ(values(6), "a=1@3 b=1@4 ");
  EXPECT_EQ(values(7), "a=2@5 b=1@4 ");
  EXPECT_EQ(values(8), "a=2@5 ");
  // And after the entry is written, from the database alone.
  EXPECT_EQ(get("\0", 4, std::string(1, '\0')).kvs_size(), 2);
  EXPECT_EQ(get("a", 3).kvs(0).value(), "1");
  EXPECT_EQ(get("b", 6).kvs_size(), 0);
}

// The index built for the first such read follows the writes after it.
TEST_F(MvccRules, RevisionsWrittenAfterAnInEntryReadAreSeenByTheNext) {
  one(put("a", "0"));  // 2
  auto txn = [](int64_t rev) {
    apply::Command c;
    auto* r = c.mutable_txn()->add_success()->mutable_request_range();
    r->set_key("a");
    r->set_revision(rev);
    return c;
  };
  auto rs = apply({put("a", "1"), put("b", "1"), txn(3), put("a", "2"), put("b", "2"), txn(5), del("a"), put("b", "3"),
                   txn(7)});
  ASSERT_EQ(rs.size(), 9u);
  auto value = [&](size_t i) {
    EXPECT_FALSE(rs.at(i).error) << i;
    const auto& kvs = std::get<etcdserverpb::TxnResponse>(rs.at(i).response).responses(0).response_range().kvs();
    return kvs.empty() ? std::string("none") : kvs[0].value() + "@" + std::to_string(kvs[0].mod_revision());
  };
  EXPECT_EQ(value(2), "1@3");
  EXPECT_EQ(value(5), "2@5");
  EXPECT_EQ(value(8), "none");  // deleted at 7
}

TEST_F(MvccRules, FailedCommandChangesNothing) {
  one(put("a", "1"));
  apply::Command c = put("b", "1");
  c.mutable_put()->set_lease(0x1234);
  auto r = one(c);
  EXPECT_EQ(r.error, errors::lease_not_found());
  apply::Command iv;
  iv.mutable_put()->set_key("missing");
  iv.mutable_put()->set_ignore_value(true);
  EXPECT_EQ(one(iv).error, errors::key_not_found());
  EXPECT_EQ(revision(), 2);
  EXPECT_EQ(get("b").kvs_size(), 0);
}

TEST(HistoryKeyCodec, OrderFollowsUserKeysThenNewestRevisionFirst) {
  using mvcc::history_key;
  std::string zero("a\0b", 3);
  EXPECT_LT(history_key("a", {5, 0}), history_key(zero, {1, 0}));
  EXPECT_LT(history_key(zero, {9, 0}), history_key("ab", {1, 0}));
  EXPECT_LT(history_key("a", {5, 1}), history_key("a", {5, 0}));
  EXPECT_LT(history_key("a", {6, 0}), history_key("a", {5, 0}));
  EXPECT_LT(history_key("a", {1, 0}), mvcc::history_key_after("a"));
  EXPECT_LT(mvcc::history_key_after("a"), history_key(zero, {1, 0}));
  std::string k;
  mvcc::Revision r;
  ASSERT_TRUE(mvcc::decode_history_key(history_key(zero, {42, 7}), &k, &r));
  EXPECT_EQ(k, zero);
  EXPECT_EQ(r.main, 42);
  EXPECT_EQ(r.sub, 7);
}

// Found by fuzz/fuzz_apply (UBSan: the expiry clock overflowed). The client
// API refuses such a TTL, but apply must too: a log entry need not come
// from that API (a forwarded command), and every member must agree.
TEST_F(MvccRules, LeaseGrantAboveTheMaxTtlInTheLogIsRefusedByApply) {
  apply::Command c;
  c.mutable_lease_grant()->set_id(5);
  c.mutable_lease_grant()->set_ttl(INT64_MAX);
  auto r = one(c);
  EXPECT_EQ(r.error.message(), errors::lease_ttl_too_large().message());
  EXPECT_FALSE(lessor_->exists(5));
  c.mutable_lease_grant()->set_ttl(lease::kMaxLeaseTtlSeconds);
  EXPECT_FALSE(one(c).error);
  EXPECT_TRUE(lessor_->exists(5));
}

}  // namespace
}  // namespace etcdq
