// The apply chain (apply/chain.h) on a real RocksDB in a temporary
// directory: the layers' order and what each refuses (etcd's corrupt and
// capped appliers), the auth slot's place, and the queues' plug-in layer
// (apply/plugin_layer.h, queue/key_space.h) as the only way /q/ keys get
// their meaning.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "apply/alarms.h"
#include "apply/auth_layer.h"
#include "apply/capped_layer.h"
#include "apply/chain.h"
#include "apply/corrupt_layer.h"
#include "apply/entry.h"
#include "apply/kv.h"
#include "apply/state_machine.h"
#include "etcdq/command.pb.h"
#include "mvcc/writer.h"
#include "queue/key_space.h"
#include "queue/keys.h"
#include "storage/iterator.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;
using apply::Command;

Command put(const std::string& k, const std::string& v) {
  Command c;
  c.mutable_put()->set_key(k);
  c.mutable_put()->set_value(v);
  return c;
}
Command del(const std::string& k, const std::string& end = "") {
  Command c;
  c.mutable_delete_range()->set_key(k);
  c.mutable_delete_range()->set_range_end(end);
  return c;
}
Command txn_put(const std::string& k, const std::string& v) {
  Command c;
  auto* op = c.mutable_txn()->add_success()->mutable_request_put();
  op->set_key(k);
  op->set_value(v);
  return c;
}
Command txn_range(const std::string& k) {
  Command c;
  c.mutable_txn()->add_success()->mutable_request_range()->set_key(k);
  return c;
}
Command compact(int64_t rev) {
  Command c;
  c.mutable_compaction()->set_revision(rev);
  return c;
}
Command lease_grant(int64_t id) {
  Command c;
  c.mutable_lease_grant()->set_id(id);
  c.mutable_lease_grant()->set_ttl(60);
  return c;
}
Command lease_revoke(int64_t id) {
  Command c;
  c.mutable_lease_revoke()->set_id(id);
  return c;
}
Command alarm(etcdserverpb::AlarmRequest::AlarmAction action, etcdserverpb::AlarmType type) {
  Command c;
  c.mutable_alarm()->set_action(action);
  c.mutable_alarm()->set_memberid(1);
  c.mutable_alarm()->set_alarm(type);
  return c;
}
Command member_attributes() {
  Command c;
  c.mutable_member_attributes()->set_id(1);
  c.mutable_member_attributes()->set_name("m1");
  return c;
}

class ApplyChain : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etcdq-chain-" + std::to_string(std::random_device{}()));
    ASSERT_FALSE(apply::StateMachine::open(dir_.string(), {}, &sm_));
    index_ = sm_->applier()->applied_index();
  }
  void TearDown() override {
    sm_.reset();
    fs::remove_all(dir_);
  }

  apply::Result one(const Command& c) {
    std::string entry;
    apply::append_framed(&entry, c.SerializeAsString());
    apply::pad_entry(&entry);
    std::vector<apply::Result> results;
    EXPECT_FALSE(sm_->applier()->apply(++index_, entry, &results));
    EXPECT_EQ(results.size(), 1u);
    return results.at(0);
  }
  void ok(const Command& c) {
    apply::Result r = one(c);
    EXPECT_FALSE(r.error) << c.ShortDebugString() << ": " << r.error.message();
  }
  void refused(const Command& c, const Error& want) {
    int64_t rev = sm_->store()->view()->revision();
    apply::Result r = one(c);
    EXPECT_EQ(r.error.code(), want.code()) << c.ShortDebugString();
    EXPECT_EQ(r.error.message(), want.message()) << c.ShortDebugString();
    EXPECT_EQ(sm_->store()->view()->revision(), rev) << "a refused command changed the store";
  }
  // The keys of [key, end) as the member's readers see them through `keys`.
  std::vector<std::string> keys(const std::string& key, const std::string& end, apply::KeySpace& ks) {
    etcdserverpb::RangeRequest r;
    r.set_key(key);
    r.set_range_end(end);
    etcdserverpb::RangeResponse resp;
    auto view = sm_->store()->view();
    apply::ViewState s(*view, ks);
    EXPECT_FALSE(apply::range(s, r, &resp));
    std::vector<std::string> out;
    for (const auto& kv : resp.kvs()) out.push_back(kv.key());
    return out;
  }
  bool exists(const std::string& key) { return !keys(key, "", apply::plain_keys()).empty(); }
  queue::Book* book() { return queue::book_of(sm_->plugins()->find("queue")); }
  // Records the queue book keeps in the meta column family.
  size_t queue_records() {
    size_t n = 0;
    storage::Iterator it = sm_->engine()->iterator(storage::Cf::kMeta);
    for (it.seek_to_first(); it.valid(); it.next()) n += it.key().starts_with("queue/") ? 1 : 0;
    return n;
  }

  fs::path dir_;
  std::unique_ptr<apply::StateMachine> sm_;
  uint64_t index_ = 0;
};

TEST_F(ApplyChain, LayersRunCorruptCappedAuthQueueBackendTopFirst) {
  std::vector<std::string_view> want = {"corrupt", "capped", "auth", "queue", "backend"};
  EXPECT_EQ(sm_->applier()->chain(), want);
}

TEST_F(ApplyChain, WithoutPlugInsThereIsNoQueueLayerAndQueueKeysArePlain) {
  apply::Applier plain(sm_->store(), sm_->lessor(), sm_->alarms(), sm_->members(), nullptr);
  std::vector<std::string_view> want = {"corrupt", "capped", "auth", "backend"};
  EXPECT_EQ(plain.chain(), want);
  EXPECT_EQ(&plain.keys(), &apply::plain_keys());

  std::string entry;
  apply::append_framed(&entry, put("/q/jobs/p/t1", "x").SerializeAsString());
  apply::pad_entry(&entry);
  std::vector<apply::Result> results;
  ASSERT_FALSE(plain.apply(++index_, entry, &results));
  ASSERT_FALSE(results.at(0).error);
  EXPECT_TRUE(exists("/q/jobs/p/t1"));  // stored as it was named: nothing produced
  EXPECT_EQ(queue_records(), 0u);
}

TEST_F(ApplyChain, CorruptAlarmRefusesEverythingButAlarmsBeforeNoSpaceIsConsulted) {
  ok(put("a", "1"));
  ok(lease_grant(7));
  ok(alarm(etcdserverpb::AlarmRequest::ACTIVATE, etcdserverpb::NOSPACE));
  ok(alarm(etcdserverpb::AlarmRequest::ACTIVATE, etcdserverpb::CORRUPT));
  // Put is refused by both layers; the corrupt one answers first.
  refused(put("a", "2"), errors::corrupt());
  refused(txn_put("a", "2"), errors::corrupt());
  refused(lease_grant(8), errors::corrupt());
  refused(del("a"), errors::corrupt());
  refused(txn_range("a"), errors::corrupt());
  refused(compact(2), errors::corrupt());
  refused(lease_revoke(7), errors::corrupt());
  ok(alarm(etcdserverpb::AlarmRequest::GET, etcdserverpb::NONE));
  ok(member_attributes());  // membership keeps working for the repair
  EXPECT_TRUE(exists("a"));

  ok(alarm(etcdserverpb::AlarmRequest::DEACTIVATE, etcdserverpb::CORRUPT));
  refused(put("a", "2"), errors::no_space());
}

TEST_F(ApplyChain, NoSpaceRefusesWhatAddsDataAndLetsDeletesCompactionsAndReadsThrough) {
  ok(put("a", "1"));
  ok(put("b", "1"));
  ok(lease_grant(7));
  ok(alarm(etcdserverpb::AlarmRequest::ACTIVATE, etcdserverpb::NOSPACE));
  refused(put("c", "1"), errors::no_space());
  refused(txn_put("c", "1"), errors::no_space());
  refused(lease_grant(8), errors::no_space());

  apply::Result r = one(txn_range("a"));
  ASSERT_FALSE(r.error);
  EXPECT_EQ(std::get<etcdserverpb::TxnResponse>(r.response).responses(0).response_range().kvs_size(), 1);
  r = one(del("b"));
  ASSERT_FALSE(r.error);
  EXPECT_EQ(std::get<etcdserverpb::DeleteRangeResponse>(r.response).deleted(), 1);
  ok(compact(sm_->store()->view()->revision()));
  ok(lease_revoke(7));

  ok(alarm(etcdserverpb::AlarmRequest::DEACTIVATE, etcdserverpb::NOSPACE));
  ok(put("c", "1"));
  EXPECT_TRUE(exists("c"));
}

// Below the auth slot, a layer that records what reaches it.
class Recorder final : public apply::Layer {
 public:
  std::string_view name() const override { return "recorder"; }
  void begin_entry(mvcc::Writer&) override { calls.push_back("begin_entry"); }
  void before_commit(mvcc::Writer&) override { calls.push_back("before_commit"); }
  void committed(int64_t revision) override { calls.push_back("committed " + std::to_string(revision)); }
  void restored() override { calls.push_back("restored"); }
  Error put(apply::ApplyCtx&, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse*) override {
    calls.push_back("put " + r.key());
    return {};
  }
  Error delete_range(apply::ApplyCtx&, const etcdserverpb::DeleteRangeRequest& r,
                     etcdserverpb::DeleteRangeResponse*) override {
    calls.push_back("delete_range " + r.key());
    return {};
  }
  Error txn(apply::ApplyCtx&, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse*) override {
    calls.push_back("txn " + std::to_string(r.success_size()));
    return {};
  }
  Error compaction(apply::ApplyCtx&, const etcdserverpb::CompactionRequest& r, etcdserverpb::CompactionResponse*,
                   int64_t*) override {
    calls.push_back("compaction " + std::to_string(r.revision()));
    return {};
  }
  Error lease_grant(apply::ApplyCtx&, const etcdserverpb::LeaseGrantRequest& r,
                    etcdserverpb::LeaseGrantResponse*) override {
    calls.push_back("lease_grant " + std::to_string(r.id()));
    return {};
  }
  Error lease_revoke(apply::ApplyCtx&, const etcdserverpb::LeaseRevokeRequest& r,
                     etcdserverpb::LeaseRevokeResponse*) override {
    calls.push_back("lease_revoke " + std::to_string(r.id()));
    return {};
  }
  Error alarm(apply::ApplyCtx&, const etcdserverpb::AlarmRequest& r, etcdserverpb::AlarmResponse*) override {
    calls.push_back("alarm " + std::to_string(r.alarm()));
    return {};
  }
  Error plugin_command(apply::ApplyCtx& c) override {
    calls.push_back("plugin_command " + c.cmd.queue_assign().queue());
    return {};
  }
  Error member_attributes(apply::ApplyCtx&, const apply::MemberAttributes& m) override {
    calls.push_back("member_attributes " + m.name());
    return {};
  }
  Error auth_management(apply::ApplyCtx&) override {
    calls.push_back("auth_management");
    return {};
  }
  std::vector<std::string> calls;
};

TEST_F(ApplyChain, AuthSlotHandsEveryCommandKindAndEntryHookToTheLayerBelow) {
  Recorder below;
  apply::AuthLayer auth(nullptr, &below);
  std::vector<Command> cmds = {put("k", "v"), del("k"), txn_put("k", "v"), compact(3), lease_grant(5),
                               lease_revoke(5), alarm(etcdserverpb::AlarmRequest::GET, etcdserverpb::NOSPACE),
                               Command(), member_attributes()};
  cmds[7].mutable_queue_assign()->set_queue("jobs");
  mvcc::Writer w(sm_->store());
  auth.begin_entry(w);
  for (const auto& c : cmds) {
    apply::ApplyCtx ctx{w, c};
    apply::Result r;
    apply::run(auth, ctx, &r);
    EXPECT_FALSE(r.error) << c.ShortDebugString();
  }
  auth.before_commit(w);
  auth.committed(9);
  auth.restored();
  std::vector<std::string> want = {"begin_entry", "put k", "delete_range k", "txn 1", "compaction 3",
                                   "lease_grant 5", "lease_revoke 5", "alarm 1", "plugin_command jobs",
                                   "member_attributes m1", "before_commit", "committed 9", "restored"};
  EXPECT_EQ(below.calls, want);
}

TEST_F(ApplyChain, AlarmLayersAboveTheAuthSlotRefuseBeforeItIsConsulted) {
  Recorder below;
  apply::AuthLayer auth(nullptr, &below);
  apply::CappedLayer capped(sm_->alarms(), &auth);
  apply::CorruptLayer corrupt(sm_->alarms(), &capped);
  ok(alarm(etcdserverpb::AlarmRequest::ACTIVATE, etcdserverpb::NOSPACE));

  mvcc::Writer w(sm_->store());
  auto run = [&](const Command& c) {
    apply::ApplyCtx ctx{w, c};
    apply::Result r;
    apply::run(corrupt, ctx, &r);
    return r.error;
  };
  EXPECT_EQ(run(put("k", "v")).message(), errors::no_space().message());
  EXPECT_FALSE(run(del("k")));
  EXPECT_EQ(below.calls, std::vector<std::string>{"delete_range k"});
}

TEST_F(ApplyChain, ProduceGoesThroughTheQueueBookAndAPlainPutNeverTouchesIt) {
  ok(put("/plain", "1"));
  ok(del("/plain"));
  ok(txn_put("/plain2", "1"));
  EXPECT_EQ(queue_records(), 0u);
  ASSERT_NE(book(), nullptr);
  EXPECT_TRUE(book()->queues().empty());

  ok(put("/q/jobs/p/t1", "x"));
  EXPECT_FALSE(exists("/q/jobs/p/t1"));  // a produce is not a plain key
  std::string msg1 = queue::message_key("jobs", 1, "t1");
  EXPECT_TRUE(exists(msg1));
  // Inside a txn too, and under /queue/.
  ok(txn_put("/queue/jobs/producer/t2", "y"));
  std::string msg2 = queue::message_key("jobs", 2, "t2");
  EXPECT_TRUE(exists(msg2));
  queue::QueueView v;
  ASSERT_TRUE(book()->view("jobs", &v));
  EXPECT_EQ(v.counters.depth(), 2u);
  EXPECT_GT(queue_records(), 0u);

  // Readers through the chain's key space see /queue/ as /q/; plain ones do not.
  std::vector<std::string> both = {msg1, msg2};
  EXPECT_EQ(keys("/queue/jobs/", "/queue/jobs0", sm_->applier()->keys()), both);
  EXPECT_TRUE(keys("/queue/jobs/", "/queue/jobs0", apply::plain_keys()).empty());

  // An ack under /queue/ deletes the message at /q/ and the book follows.
  apply::Result r = one(del("/queue/jobs/" + msg1.substr(std::string("/q/jobs/").size())));
  ASSERT_FALSE(r.error);
  EXPECT_EQ(std::get<etcdserverpb::DeleteRangeResponse>(r.response).deleted(), 1);
  EXPECT_FALSE(exists(msg1));
  ASSERT_TRUE(book()->view("jobs", &v));
  EXPECT_EQ(v.counters.depth(), 1u);
}

TEST_F(ApplyChain, ProduceWithAnUnknownLeaseIsRefusedBeforeTheBookSeesIt) {
  Command c = put("/q/jobs/p/t1", "x");
  c.mutable_put()->set_lease(12345);
  refused(c, errors::lease_not_found());
  EXPECT_EQ(queue_records(), 0u);
}

}  // namespace
}  // namespace etcdq
