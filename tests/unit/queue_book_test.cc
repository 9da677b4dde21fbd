// The queue book on the apply path (queue/book.h): a message's first
// assignment hands this member exactly what produce stored, whether the
// book still remembers the message from its produce or reads it back from
// the database (after a restart), and stale or late decisions change
// nothing. Real RocksDB in a temp dir, entries through the real applier.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "apply/entry.h"
#include "apply/kv.h"
#include "apply/state_machine.h"
#include "etcdq/command.pb.h"
#include "queue/book.h"
#include "queue/key_space.h"
#include "queue/keys.h"
#include "queue/rebuild.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;
using apply::Command;

constexpr uint64_t kSelf = 7;

Command produce(const std::string& queue, const std::string& tail, const std::string& value) {
  Command c;
  c.mutable_put()->set_key("/q/" + queue + "/p/" + tail);
  c.mutable_put()->set_value(value);
  return c;
}

Command ack(const std::string& key) {
  Command c;
  c.mutable_delete_range()->set_key(key);
  return c;
}

// The leader's decision: message `idx`, delivered `deliveries` times so
// far, goes to consumer `instance` on this member.
Command assign(const std::string& queue, uint64_t idx, uint32_t deliveries, uint64_t instance = 1) {
  Command c;
  auto* a = c.mutable_queue_assign();
  a->set_queue(queue);
  a->set_deadline_ms(4102444800000);  // far ahead
  auto* as = a->add_assignments();
  as->set_idx(idx);
  as->set_deliveries(deliveries);
  as->set_member(kSelf);
  as->set_instance(instance);
  return c;
}

class QueueBook : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etcdq-book-" + std::to_string(std::random_device{}()));
    open();
  }
  void TearDown() override {
    sm_.reset();
    fs::remove_all(dir_);
  }
  // Opens (again) the state machine in dir_: a restart, as far as the
  // book's memory goes.
  void open() {
    sm_.reset();
    ASSERT_FALSE(apply::StateMachine::open(dir_.string(), {}, &sm_));
    index_ = sm_->applier()->applied_index();
    book_ = queue::book_of(sm_->plugins()->find("queue"));
    ASSERT_NE(book_, nullptr);
    book_->set_self(kSelf);
    book_->set_deliver([this](std::vector<queue::Delivery>&& d) {
      for (auto& x : d) delivered_.push_back(std::move(x));
    });
  }
  // One log entry holding `cmds`; every command must succeed.
  void entry(const std::vector<Command>& cmds) {
    std::string e;
    for (const auto& c : cmds) apply::append_framed(&e, c.SerializeAsString());
    apply::pad_entry(&e);
    std::vector<apply::Result> results;
    ASSERT_FALSE(sm_->applier()->apply(++index_, e, &results));
    ASSERT_EQ(results.size(), cmds.size());
    for (const auto& r : results) EXPECT_FALSE(r.error) << r.error.message();
  }
  // The key-value a reader sees at `key` now.
  bool stored(const std::string& key, mvccpb::KeyValue* kv) {
    etcdserverpb::RangeRequest r;
    r.set_key(key);
    etcdserverpb::RangeResponse resp;
    auto view = sm_->store()->view();
    apply::ViewState s(*view, apply::plain_keys());
    EXPECT_FALSE(apply::range(s, r, &resp));
    if (resp.kvs_size() != 1) return false;
    *kv = resp.kvs(0);
    return true;
  }
  // The last delivery equals what a reader sees at its key.
  void expect_delivered_as_stored(const std::string& key, const std::string& value) {
    ASSERT_FALSE(delivered_.empty());
    const queue::Delivery& d = delivered_.back();
    mvccpb::KeyValue kv;
    ASSERT_TRUE(stored(key, &kv));
    EXPECT_EQ(d.kv.SerializeAsString(), kv.SerializeAsString())
        << d.kv.ShortDebugString() << " vs " << kv.ShortDebugString();
    EXPECT_EQ(d.kv.key(), key);
    EXPECT_EQ(d.kv.value(), value);
    EXPECT_EQ(d.instance, 1u);
    EXPECT_EQ(d.revision, sm_->store()->view()->revision());
  }

  fs::path dir_;
  std::unique_ptr<apply::StateMachine> sm_;
  queue::Book* book_ = nullptr;  // the state's queue instance's
  uint64_t index_ = 0;
  std::vector<queue::Delivery> delivered_;
};

TEST_F(QueueBook, FirstDeliveryIsWhatProduceStored_RememberedOrReadBackAfterARestart) {
  entry({produce("jobs", "a", "one")});
  entry({produce("jobs", "b", "two"), produce("jobs", "c", "three")});
  std::string k1 = queue::message_key("jobs", 1, "a"), k2 = queue::message_key("jobs", 2, "b"),
              k3 = queue::message_key("jobs", 3, "c");

  entry({assign("jobs", 1, 0)});  // remembered from its produce
  ASSERT_EQ(delivered_.size(), 1u);
  expect_delivered_as_stored(k1, "one");

  open();  // the book remembers nothing now: the database answers
  entry({assign("jobs", 2, 0)});
  ASSERT_EQ(delivered_.size(), 2u);
  expect_delivered_as_stored(k2, "two");

  // Produced and handed out in the same entry.
  entry({produce("jobs", "d", "four"), assign("jobs", 4, 0)});
  ASSERT_EQ(delivered_.size(), 3u);
  expect_delivered_as_stored(queue::message_key("jobs", 4, "d"), "four");

  queue::QueueView v;
  ASSERT_TRUE(book_->view("jobs", &v));
  EXPECT_EQ(v.counters.depth(), 4u);
  EXPECT_EQ(v.counters.delivered(), 3u);
  // 3 was skipped on the way to 4: it joined the handed-out set, undelivered.
  ASSERT_EQ(v.handed_out.size(), 4u);
  EXPECT_EQ(v.handed_out.at(3).deliveries(), 0u);
  EXPECT_EQ(v.handed_out.at(4).deliveries(), 1u);
  EXPECT_EQ(v.handed_out.at(4).member(), kSelf);
  entry({assign("jobs", 3, 0)});
  ASSERT_EQ(delivered_.size(), 4u);
  expect_delivered_as_stored(k3, "three");
}

TEST_F(QueueBook, AQueueWithOnlyAConfigStartsAtIdx1AfterARestart) {
  Command config;
  config.mutable_put()->set_key("/q/jobs/config");
  config.mutable_put()->set_value("{\"max_deliveries\": 3}");
  entry({config});
  open();
  entry({produce("jobs", "a", "one")});
  mvccpb::KeyValue kv;
  EXPECT_TRUE(stored(queue::message_key("jobs", 1, "a"), &kv));
  EXPECT_FALSE(stored(queue::message_key("jobs", 0, "a"), &kv));
}

// After a restore, the history that went on after the backup may have put
// a ch: queue's later idx into ClickHouse (queue/clickhouse.h names rows by
// queue and idx): the first produce to a ch: queue fixes a base from its
// entry's time (the same on every member), and no ch: queue goes below it;
// other queues go on as before.
TEST_F(QueueBook, AfterARestoreChQueuesGoOnFromTheFirstProducesTimeInMicroseconds) {
  entry({produce("ch:events", "a", "{}"), produce("jobs", "a", "1")});
  // What `etcdq snapshot restore` does after writing the keys.
  queue::RebuildStats stats;
  ASSERT_FALSE(queue::rebuild_records(sm_->engine(), 1, &stats));
  open();
  constexpr int64_t kTimeMs = 1765000000123;
  Command first = produce("ch:new", "b", "{}");
  first.set_time_ms(kTimeMs);
  Command later = produce("ch:events", "b", "{}");
  later.set_time_ms(kTimeMs + 5000);  // the base stays the first one's
  entry({first, later, produce("jobs", "b", "2")});
  mvccpb::KeyValue kv;
  const uint64_t base = static_cast<uint64_t>(kTimeMs) * 1000;
  EXPECT_TRUE(stored(queue::message_key("ch:new", base, "b"), &kv));
  EXPECT_TRUE(stored(queue::message_key("ch:events", 1, "a"), &kv));  // the restored message keeps its idx
  EXPECT_TRUE(stored(queue::message_key("ch:events", base, "b"), &kv));
  EXPECT_TRUE(stored(queue::message_key("jobs", 2, "b"), &kv));
  // Kept across a restart: a ch: queue first used now starts at the base too.
  open();
  entry({produce("ch:other", "c", "{}"), produce("ch:new", "c", "{}")});
  EXPECT_TRUE(stored(queue::message_key("ch:other", base, "c"), &kv));
  EXPECT_TRUE(stored(queue::message_key("ch:new", base + 1, "c"), &kv));
}

// A plain key with a message's idx and another tail can exist only from
// keys written to etcd by hand and restored (the boundary refuses such a
// Put; the applier here takes it, as a restore would have stored it).
TEST_F(QueueBook, DeletingAPlainKeyOfAMessagesIdxLeavesTheMessage_HandedOutRememberedOrNot) {
  Command plain;
  plain.mutable_put()->set_key(queue::message_key("jobs", 1, "other"));
  plain.mutable_put()->set_value("x");
  Command plain2 = plain;
  plain2.mutable_put()->set_key(queue::message_key("jobs", 2, "other"));
  Command plain3 = plain;
  plain3.mutable_put()->set_key(queue::message_key("jobs", 3, "other"));
  entry({produce("jobs", "a", "one"), produce("jobs", "b", "two"), produce("jobs", "c", "three"), plain, plain2,
         plain3});
  entry({assign("jobs", 1, 0)});                 // 1: handed out
  entry({ack(queue::message_key("jobs", 1, "other"))});
  entry({ack(queue::message_key("jobs", 2, "other"))});  // 2: remembered
  open();                                                // 3: neither
  entry({ack(queue::message_key("jobs", 3, "other"))});
  queue::QueueView v;
  ASSERT_TRUE(book_->view("jobs", &v));
  EXPECT_EQ(v.counters.depth(), 3u);
  EXPECT_EQ(v.counters.acked(), 0u);
  entry({assign("jobs", 2, 0)});
  entry({assign("jobs", 3, 0)});
  ASSERT_EQ(delivered_.size(), 3u);
  expect_delivered_as_stored(queue::message_key("jobs", 3, "c"), "three");
  // The messages' own acks still work.
  entry({ack(queue::message_key("jobs", 1, "a")), ack(queue::message_key("jobs", 2, "b"))});
  ASSERT_TRUE(book_->view("jobs", &v));
  EXPECT_EQ(v.counters.depth(), 1u);
  EXPECT_EQ(v.counters.acked(), 2u);
}

TEST_F(QueueBook, AMessageAckedBeforeItsAssignmentIsNotDelivered_RememberedOrNot) {
  entry({produce("jobs", "a", "one"), produce("jobs", "b", "two")});
  entry({ack(queue::message_key("jobs", 1, "a"))});
  entry({assign("jobs", 1, 0)});
  EXPECT_TRUE(delivered_.empty());

  open();
  entry({ack(queue::message_key("jobs", 2, "b"))});
  entry({assign("jobs", 2, 0)});
  EXPECT_TRUE(delivered_.empty());
  queue::QueueView v;
  EXPECT_FALSE(book_->view("jobs", &v) && v.counters.depth() != 0);
}

TEST_F(QueueBook, AStaleDecisionChangesNothing_AndTheRightOneStillDelivers) {
  entry({produce("jobs", "a", "one")});
  entry({assign("jobs", 1, 3)});  // decided on a state where it was delivered 3 times
  EXPECT_TRUE(delivered_.empty());
  queue::QueueView v;
  ASSERT_TRUE(book_->view("jobs", &v));
  EXPECT_EQ(v.counters.delivered(), 0u);
  EXPECT_TRUE(v.handed_out.empty());

  entry({assign("jobs", 1, 0)});
  ASSERT_EQ(delivered_.size(), 1u);
  expect_delivered_as_stored(queue::message_key("jobs", 1, "a"), "one");
  // Redelivery: the record now says 1 delivery; a decision that says 0 is stale.
  entry({assign("jobs", 1, 0, 2)});
  EXPECT_EQ(delivered_.size(), 1u);
  entry({assign("jobs", 1, 1, 2)});
  ASSERT_EQ(delivered_.size(), 2u);
  EXPECT_EQ(delivered_.back().instance, 2u);
  EXPECT_EQ(delivered_.back().kv.value(), "one");
}

// --- fill: apply hands new messages to ready consumers itself ------------

constexpr int64_t kT0 = 1'800'000'000'000;  // a command time (Unix ms)

Command at(Command c, int64_t time_ms) {
  c.set_time_ms(time_ms);
  return c;
}

// The leader's word that these consumers of this member are live (or not).
Command ready(const std::string& queue, std::vector<uint64_t> up, std::vector<uint64_t> gone = {}) {
  Command c;
  auto* a = c.mutable_queue_assign();
  a->set_queue(queue);
  for (uint64_t i : up) {
    auto* r = a->add_ready();
    r->set_member(kSelf);
    r->set_instance(i);
  }
  for (uint64_t i : gone) {
    auto* r = a->add_gone();
    r->set_member(kSelf);
    r->set_instance(i);
  }
  return at(c, kT0);
}

TEST_F(QueueBook, AReadyConsumerGetsANewMessageInTheEntryThatProducedIt) {
  entry({ready("jobs", {1})});
  entry({at(produce("jobs", "a", "one"), kT0 + 5)});
  ASSERT_EQ(delivered_.size(), 1u);  // no assignment command
  expect_delivered_as_stored(queue::message_key("jobs", 1, "a"), "one");
  queue::QueueView v;
  ASSERT_TRUE(book_->view("jobs", &v));
  ASSERT_EQ(v.handed_out.size(), 1u);
  EXPECT_EQ(v.handed_out.at(1).member(), kSelf);
  EXPECT_EQ(v.handed_out.at(1).instance(), 1u);
  EXPECT_EQ(v.handed_out.at(1).deadline_ms(), kT0 + 5 + 30000);  // the command's time + visibility timeout
  EXPECT_EQ(v.counters.cursor(), 1u);
  EXPECT_EQ(v.counters.delivered(), 1u);
  EXPECT_EQ(v.ready, (std::vector<queue::ReadyConsumer>{{kSelf, 1}}));

  // Without a command time (a log written before fill) nothing is filled:
  // the scheduler assigns, as before.
  entry({produce("jobs", "b", "two")});
  EXPECT_EQ(delivered_.size(), 1u);
  // The next timed entry hands it out, in idx order.
  entry({at(ack(queue::message_key("jobs", 1, "a")), kT0 + 10)});
  ASSERT_EQ(delivered_.size(), 2u);
  EXPECT_EQ(delivered_.back().kv.key(), queue::message_key("jobs", 2, "b"));
}

TEST_F(QueueBook, FillKeepsMaxInFlight_AnAckFreesRoomForTheNextInIdxOrder) {
  Command config;
  config.mutable_put()->set_key("/q/jobs/config");
  config.mutable_put()->set_value("{\"max_in_flight\": 1}");
  entry({config, ready("jobs", {1})});
  entry({at(produce("jobs", "a", "one"), kT0), at(produce("jobs", "b", "two"), kT0),
         at(produce("jobs", "c", "three"), kT0)});
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_EQ(delivered_[0].kv.key(), queue::message_key("jobs", 1, "a"));
  entry({at(ack(queue::message_key("jobs", 1, "a")), kT0 + 1)});
  ASSERT_EQ(delivered_.size(), 2u);
  EXPECT_EQ(delivered_[1].kv.key(), queue::message_key("jobs", 2, "b"));
  // A message deleted before its delivery is skipped, not waited for.
  entry({at(ack(queue::message_key("jobs", 3, "c")), kT0 + 2)});
  entry({at(produce("jobs", "d", "four"), kT0 + 3)});
  EXPECT_EQ(delivered_.size(), 2u);  // still full
  entry({at(ack(queue::message_key("jobs", 2, "b")), kT0 + 4)});
  ASSERT_EQ(delivered_.size(), 3u);
  EXPECT_EQ(delivered_[2].kv.key(), queue::message_key("jobs", 4, "d"));
}

TEST_F(QueueBook, AMessageDueAgainGoesFirst_FillLeavesTheQueueToTheScheduler) {
  entry({ready("jobs", {1})});
  entry({at(produce("jobs", "a", "one"), kT0)});
  ASSERT_EQ(delivered_.size(), 1u);
  // Past message 1's visibility timeout: it is due again, so message 2
  // waits for the leader's redelivery of 1.
  entry({at(produce("jobs", "b", "two"), kT0 + 30001)});
  EXPECT_EQ(delivered_.size(), 1u);
  Command again = assign("jobs", 1, 1);
  again.set_time_ms(kT0 + 30002);
  again.mutable_queue_assign()->set_deadline_ms(kT0 + 60002);
  entry({again});  // the redelivery's entry fills the rest
  ASSERT_EQ(delivered_.size(), 3u);
  EXPECT_EQ(delivered_[1].kv.key(), queue::message_key("jobs", 1, "a"));
  EXPECT_EQ(delivered_[2].kv.key(), queue::message_key("jobs", 2, "b"));
}

TEST_F(QueueBook, ThePickComesFromReplicatedStateOnly_TheSameAfterARestart) {
  entry({ready("jobs", {5, 9})});
  entry({at(produce("jobs", "a", "one"), kT0)});  // idx 1: ready[1 % 2]
  open();                                          // ready consumers and holds come back from the database
  entry({at(produce("jobs", "b", "two"), kT0)});  // idx 2: ready[2 % 2]
  entry({at(produce("jobs", "c", "three"), kT0)});
  ASSERT_EQ(delivered_.size(), 3u);
  EXPECT_EQ(delivered_[0].instance, 9u);
  EXPECT_EQ(delivered_[1].instance, 5u);
  EXPECT_EQ(delivered_[2].instance, 9u);
  // A consumer gone takes nothing new; what it holds stays its own.
  entry({ready("jobs", {}, {9})});
  entry({at(produce("jobs", "d", "four"), kT0)});
  ASSERT_EQ(delivered_.size(), 4u);
  EXPECT_EQ(delivered_[3].instance, 5u);
  queue::QueueView v;
  ASSERT_TRUE(book_->view("jobs", &v));
  EXPECT_EQ(v.ready, (std::vector<queue::ReadyConsumer>{{kSelf, 5}}));
  EXPECT_EQ(v.handed_out.at(1).instance(), 9u);
  // With no ready consumer left and no message, the queue leaves the mirror.
  entry({ready("jobs", {}, {5}), at(ack(queue::message_key("jobs", 1, "a")), kT0),
         at(ack(queue::message_key("jobs", 2, "b")), kT0), at(ack(queue::message_key("jobs", 3, "c")), kT0),
         at(ack(queue::message_key("jobs", 4, "d")), kT0)});
  EXPECT_FALSE(book_->view("jobs", &v));
  open();
  EXPECT_FALSE(book_->view("jobs", &v));
}

}  // namespace
}  // namespace etcdq
