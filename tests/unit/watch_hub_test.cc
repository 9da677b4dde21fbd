// mvcc/watch_hub.h and server/watch_wire.h: events encoded once and
// assembled into WatchResponses byte for byte as protobuf writes them; one
// batch per revision to synced watchers, filters and prev_kv; a sink that
// refuses catches up from storage in order with nothing lost or repeated;
// and no prev_kv below the compaction (etcd reads prev_kv at
// mod_revision - 1 and gets nothing there).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "apply/entry.h"
#include "apply/state_machine.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcdq/command.pb.h"
#include "mvcc/store.h"
#include "mvcc/watch_hub.h"
#include "server/watch_wire.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;
using etcdserverpb::WatchResponse;
using mvccpb::Event;

Event make_event(Event::EventType type, const std::string& key, const std::string& value, int64_t rev,
                 const std::string& prev_value) {
  Event ev;
  ev.set_type(type);
  ev.mutable_kv()->set_key(key);
  ev.mutable_kv()->set_value(value);
  ev.mutable_kv()->set_mod_revision(rev);
  ev.mutable_kv()->set_create_revision(2);
  ev.mutable_kv()->set_version(rev - 1);
  if (!prev_value.empty()) {
    ev.mutable_prev_kv()->set_key(key);
    ev.mutable_prev_kv()->set_value(prev_value);
    ev.mutable_prev_kv()->set_mod_revision(rev - 1);
  }
  return ev;
}

TEST(HubEvent, BytesWithoutPrevAreTheEventWithPrevKvCleared) {
  for (const std::string& prev : {std::string(), std::string("p"), std::string(300, 'q')}) {
    Event ev = make_event(Event::PUT, "k", std::string(200, 'v'), 7, prev);
    Event bare = ev;
    bare.clear_prev_kv();
    mvcc::HubEvent h{Event(ev)};
    h.encode();
    EXPECT_EQ(h.bytes(true), ev.SerializeAsString());
    EXPECT_EQ(h.bytes(false), bare.SerializeAsString());
  }
}

// The raw response equals protobuf's serialization of the same message.
void expect_wire_matches(const server::WireHeader& h, int64_t watch_id, bool fragment,
                         const std::vector<Event>& events) {
  WatchResponse want;
  want.mutable_header()->set_cluster_id(h.cluster_id);
  want.mutable_header()->set_member_id(h.member_id);
  want.mutable_header()->set_revision(h.revision);
  want.mutable_header()->set_raft_term(h.raft_term);
  want.set_watch_id(watch_id);
  want.set_fragment(fragment);
  std::string body;
  for (const auto& ev : events) {
    *want.add_events() = ev;
    std::string b = ev.SerializeAsString();
    server::append_event_field(&body, b);
  }
  size_t field_bytes = 0;
  for (const auto& ev : events) field_bytes += server::event_field_size(ev.ByteSizeLong());
  EXPECT_EQ(field_bytes, body.size());
  grpc::ByteBuffer buf = server::encode_watch_response(h, watch_id, fragment, &body);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buf.Dump(&slices).ok());
  std::string got;
  for (const auto& s : slices) got.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(got, want.SerializeAsString());
  WatchResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(got));
  EXPECT_EQ(parsed.events_size(), static_cast<int>(events.size()));
}

TEST(WatchWire, ResponsesAreByteForByteProtobufs) {
  server::WireHeader h{0x1234567890abcdefULL, 0xfedcba0987654321ULL, 123456789, 7};
  std::vector<Event> one = {make_event(Event::PUT, "a", "1", 5, "")};
  std::vector<Event> several = {make_event(Event::PUT, "a", "1", 5, "0"), make_event(Event::DELETE, "b", "", 5, "x")};
  expect_wire_matches(h, 0, false, one);  // watch id 0 is left out, as protobuf does
  expect_wire_matches(h, 1, false, several);
  expect_wire_matches(h, -1, false, {});  // a progress response: no events
  expect_wire_matches(h, INT64_MAX, true, several);
  expect_wire_matches(server::WireHeader{}, 3, false, one);  // an empty header is still written
  // Big bodies are handed to gRPC, not copied: two slices, same bytes.
  std::vector<Event> big = {make_event(Event::PUT, "big", std::string(server::kShareBodyBytes, 'z'), 9, "y")};
  expect_wire_matches(h, 2, false, big);
}

// A sink that records what it is offered; refuses while `refuse` is set.
class RecordingSink : public mvcc::WatchSink {
 public:
  bool offer(const mvcc::WatchBatch& b) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refuse && !b.events.empty()) {
      refused = true;
      return false;
    }
    if (b.events.size() > 1 && b.bytes > room_bytes) {  // as a stream's bound: a lone event always fits
      ++oversize;
      return false;
    }
    std::vector<Event> evs;
    for (const auto& r : b.events) {
      Event e;
      EXPECT_TRUE(e.ParseFromArray(r.bytes().data(), static_cast<int>(r.bytes().size())));
      evs.push_back(std::move(e));
    }
    batches.push_back(std::move(evs));
    cv_.notify_all();
    return true;
  }
  size_t room() const override { return refuse ? 0 : room_bytes.load(); }

  // The events received so far, waiting up to 10 s for at least `n`.
  std::vector<Event> wait_events(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return count_locked() >= n; });
    std::vector<Event> all;
    for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
    return all;
  }
  size_t count_locked() const {
    size_t n = 0;
    for (const auto& b : batches) n += b.size();
    return n;
  }

  std::atomic<bool> refuse{false};
  std::atomic<size_t> room_bytes{SIZE_MAX};
  bool refused = false;
  int oversize = 0;  // batches refused for their size
  std::vector<std::vector<Event>> batches;

  std::mutex& mu() { return mu_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

class WatchHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etcdq-hub-" + std::to_string(std::random_device{}()));
    ASSERT_FALSE(apply::StateMachine::open(dir_.string(), {}, &state_));
    store_ = state_->store();
    applier_ = state_->applier();
    index_ = applier_->applied_index();
  }
  void TearDown() override {
    state_.reset();
    fs::remove_all(dir_);
  }
  void apply(std::vector<apply::Command> cmds) {
    std::string entry;
    for (auto& c : cmds) apply::append_framed(&entry, c.SerializeAsString());
    apply::pad_entry(&entry);
    std::vector<apply::Result> results;
    ASSERT_FALSE(applier_->apply(++index_, entry, &results));
  }
  static apply::Command put(const std::string& k, const std::string& v) {
    apply::Command c;
    c.mutable_put()->set_key(k);
    c.mutable_put()->set_value(v);
    return c;
  }
  static apply::Command del(const std::string& k) {
    apply::Command c;
    c.mutable_delete_range()->set_key(k);
    return c;
  }
  static apply::Command txn(std::vector<std::pair<std::string, std::string>> kvs) {
    apply::Command c;
    for (auto& [k, v] : kvs) {
      auto* op = c.mutable_txn()->add_success()->mutable_request_put();
      op->set_key(k);
      op->set_value(v);
    }
    return c;
  }
  static apply::Command compact(int64_t rev) {
    apply::Command c;
    c.mutable_compaction()->set_revision(rev);
    return c;
  }
  int64_t revision() { return store_->view()->revision(); }
  mvcc::WatchHub& hub() { return store_->watch_hub(); }
  bool synced(mvcc::WatchSink* s, int64_t id) { return hub().if_synced(s, id, [](int64_t) {}); }

  fs::path dir_;
  std::unique_ptr<apply::StateMachine> state_;
  mvcc::Store* store_ = nullptr;
  apply::Applier* applier_ = nullptr;
  uint64_t index_ = 0;
};

TEST_F(WatchHubTest, SyncedWatchersGetEachRevisionWholeFilteredAndShaped) {
  RecordingSink sink;
  mvcc::WatchSpec all{"a", "b", revision() + 1, true, false, false};  // prefix "a"
  mvcc::WatchSpec no_put{"a", "b", revision() + 1, false, true, false};
  hub().add(&sink, 1, all);
  RecordingSink sink2;
  hub().add(&sink2, 2, no_put);
  ASSERT_TRUE(synced(&sink, 1));
  apply({put("a1", "x")});
  apply({txn({{"a2", "y"}, {"a1", "z"}, {"b", "not watched"}})});
  apply({del("a1")});
  auto evs = sink.wait_events(4);
  ASSERT_EQ(evs.size(), 4u);
  ASSERT_EQ(sink.batches.size(), 3u);        // one batch per revision
  EXPECT_EQ(sink.batches[1].size(), 2u);     // the txn's two events together
  EXPECT_EQ(evs[2].kv().key(), "a1");
  EXPECT_EQ(evs[2].prev_kv().value(), "x");  // asked for prev_kv
  EXPECT_EQ(evs[3].type(), Event::DELETE);
  EXPECT_EQ(evs[3].prev_kv().value(), "z");
  auto dels = sink2.wait_events(1);
  ASSERT_EQ(dels.size(), 1u);  // NOPUT: the delete only, without prev_kv
  EXPECT_EQ(dels[0].type(), Event::DELETE);
  EXPECT_FALSE(dels[0].has_prev_kv());
  hub().remove_all(&sink);
  hub().remove_all(&sink2);
}

TEST_F(WatchHubTest, OneEntryOfManyRevisionsIsOneBatchAWatcherInRevisionOrder) {
  // An applied entry holds many writes at full speed: a synced watcher
  // gets all of its events of that entry in one batch, filters and
  // prev_kv applied per event as before.
  RecordingSink sink, deletes;
  int64_t start = revision() + 1;
  hub().add(&sink, 1, mvcc::WatchSpec{"a", "b", start, true, false, false});
  hub().add(&deletes, 2, mvcc::WatchSpec{"a", "b", start, false, true, false});  // NOPUT
  apply({put("a1", "x"), put("zz", "not watched"), txn({{"a2", "y"}, {"a1", "z"}}), del("a1"), put("a3", "w")});
  auto evs = sink.wait_events(5);
  {
    std::lock_guard<std::mutex> lock(sink.mu());
    ASSERT_EQ(sink.batches.size(), 1u);
  }
  ASSERT_EQ(evs.size(), 5u);
  std::vector<int64_t> revs;
  for (const auto& e : evs) revs.push_back(e.kv().mod_revision());
  EXPECT_EQ(revs, (std::vector<int64_t>{start, start + 2, start + 2, start + 3, start + 4}));
  EXPECT_EQ(evs[2].prev_kv().value(), "x");
  EXPECT_EQ(evs[3].type(), Event::DELETE);
  EXPECT_EQ(evs[3].prev_kv().value(), "z");
  auto dels = deletes.wait_events(1);
  ASSERT_EQ(dels.size(), 1u);
  EXPECT_EQ(dels[0].type(), Event::DELETE);
  EXPECT_FALSE(dels[0].has_prev_kv());
  hub().remove_all(&sink);
  hub().remove_all(&deletes);
}

TEST_F(WatchHubTest, ARefusedEntryCatchesUpFromItsFirstRevisionExactlyOnce) {
  RecordingSink sink;
  int64_t start = revision() + 1;
  hub().add(&sink, 5, mvcc::WatchSpec{"k", "", start, false, false, false});
  apply({put("k", "0"), put("k", "1")});
  sink.wait_events(2);
  sink.refuse = true;
  apply({put("k", "2"), put("k", "3"), put("k", "4")});
  EXPECT_FALSE(synced(&sink, 5));
  sink.refuse = false;
  hub().wake();
  apply({put("k", "5"), put("k", "6")});
  auto evs = sink.wait_events(7);
  ASSERT_EQ(evs.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(evs[i].kv().value(), std::to_string(i));
    EXPECT_EQ(evs[i].kv().mod_revision(), start + i);
  }
  hub().remove_all(&sink);
}

// A sink that, like a watch stream, asks the hub to run its write start
// once the pass is dispatched, and records what it held by then.
class DeferringSink : public mvcc::WatchSink {
 public:
  bool offer(const mvcc::WatchBatch& b) override {
    events += b.events.size();
    ++offers;
    if (!scheduled) {
      scheduled = true;
      deferred = mvcc::WatchHub::defer(
          [](void* arg, bool here) {
            auto* s = static_cast<DeferringSink*>(arg);
            s->scheduled = false;
            s->events_at_start = s->events;
            s->here = here;
            ++s->starts;
          },
          this);
    }
    return true;
  }
  size_t room() const override { return SIZE_MAX; }
  size_t events = 0, offers = 0, events_at_start = 0;
  int starts = 0;
  bool scheduled = false, deferred = false, here = false;
};

TEST_F(WatchHubTest, WritesStartOnlyOnceTheWholeEntryIsDispatchedAlsoPastTheFewStartedInline) {
  // Past the few streams whose write the apply thread starts itself, the
  // rest are handed to writer threads: also only after the whole entry,
  // or a writer thread would send its first revisions alone.
  constexpr int kSinks = 12;
  std::vector<std::unique_ptr<DeferringSink>> sinks;
  int64_t start = revision() + 1;
  for (int i = 0; i < kSinks; ++i) {
    sinks.push_back(std::make_unique<DeferringSink>());
    hub().add(sinks.back().get(), 1, mvcc::WatchSpec{"p", "q", start, false, false, false});
    hub().add(sinks.back().get(), 2, mvcc::WatchSpec{"p2", "", start, false, false, false});
  }
  apply({put("p1", "a"), put("p2", "b"), put("p3", "c"), put("x", "d")});
  int here = 0;
  for (const auto& s : sinks) {
    EXPECT_TRUE(s->deferred);
    EXPECT_EQ(s->offers, 2u);  // one batch a watcher for the entry
    EXPECT_EQ(s->starts, 1);
    EXPECT_EQ(s->events, 4u);  // three for the prefix, one for the key
    EXPECT_EQ(s->events_at_start, 4u);
    if (s->here) ++here;
  }
  EXPECT_EQ(here, 4);  // kMaxDeferred start here; the rest are handed off
  EXPECT_FALSE(mvcc::WatchHub::defer([](void*, bool) {}, nullptr));  // outside publish()
  for (const auto& s : sinks) hub().remove_all(s.get());
}

TEST_F(WatchHubTest, RefusingSinkCatchesUpInOrderExactlyOnce) {
  RecordingSink sink;
  int64_t start = revision() + 1;
  hub().add(&sink, 7, mvcc::WatchSpec{"k", "", start, false, false, false});
  apply({put("k", "0")});
  sink.wait_events(1);
  sink.refuse = true;
  for (int i = 1; i <= 50; ++i) apply({put("k", std::to_string(i))});
  EXPECT_FALSE(synced(&sink, 7));
  sink.refuse = false;
  hub().wake();
  for (int i = 51; i <= 60; ++i) apply({put("k", std::to_string(i))});
  auto evs = sink.wait_events(61);
  ASSERT_EQ(evs.size(), 61u);
  for (int i = 0; i <= 60; ++i) {
    EXPECT_EQ(evs[i].kv().value(), std::to_string(i));
    EXPECT_EQ(evs[i].kv().mod_revision(), start + i);
  }
  hub().remove_all(&sink);
}

TEST_F(WatchHubTest, CatchUpReadsNoMoreThanTheSinkHasRoomFor) {
  // A step that overshot the room was refused, read again and refused
  // again: the watcher never caught up while its stream held anything.
  RecordingSink sink;
  int64_t start = revision() + 1;
  hub().add(&sink, 3, mvcc::WatchSpec{"k", "", start, false, false, false});
  sink.refuse = true;
  for (int i = 0; i < 20; ++i) apply({put("k", std::string(100, static_cast<char>('a' + i)))});
  sink.room_bytes = 500;  // about four events
  sink.refuse = false;
  hub().wake();
  auto evs = sink.wait_events(20);
  ASSERT_EQ(evs.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(evs[i].kv().mod_revision(), start + i);
  std::lock_guard<std::mutex> lock(sink.mu());
  EXPECT_EQ(sink.oversize, 0);
  EXPECT_GE(sink.batches.size(), 5u);
  hub().remove_all(&sink);
}

TEST_F(WatchHubTest, ProgressGivesTheLastRevisionDeliveredOnlyWhileEveryWatcherIsSynced) {
  RecordingSink sink;
  int64_t seen = -1;
  // No watchers: no answer (etcd 3.6 sends its answer through a watcher).
  EXPECT_FALSE(hub().if_all_synced(&sink, [&](int64_t r) { seen = r; }));
  EXPECT_EQ(seen, -1);
  int64_t start = revision() + 1;
  hub().add(&sink, 1, mvcc::WatchSpec{"k", "", start, false, false, false});
  hub().add(&sink, 2, mvcc::WatchSpec{"j", "", start, false, false, false});
  apply({put("k", "1")});
  sink.wait_events(1);
  ASSERT_TRUE(hub().if_all_synced(&sink, [&](int64_t r) { seen = r; }));
  EXPECT_EQ(seen, start);  // the revision of the one event delivered
  sink.refuse = true;
  apply({put("k", "2")});  // watcher 1 goes to catch-up
  EXPECT_FALSE(synced(&sink, 1));
  ASSERT_TRUE(hub().if_synced(&sink, 2, [&](int64_t r) { seen = r; }));  // nothing of "j" is behind
  EXPECT_EQ(seen, revision());
  EXPECT_FALSE(synced(&sink, 9));  // no such watcher
  // Dropped, not kept, while watcher 1 catches up (etcd 3.6).
  int answers = 0;
  EXPECT_FALSE(hub().if_all_synced(&sink, [&](int64_t) { ++answers; }));
  sink.refuse = false;
  hub().wake();
  ASSERT_EQ(sink.wait_events(2).size(), 2u);
  for (int i = 0; i < 500 && !synced(&sink, 1); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(answers, 0);
  // Asked again once it is synced: answered, after the event it caught up.
  ASSERT_TRUE(hub().if_all_synced(&sink, [&](int64_t r) { seen = r; ++answers; }));
  EXPECT_EQ(answers, 1);
  EXPECT_EQ(seen, revision());
  hub().remove_all(&sink);
}

TEST_F(WatchHubTest, NoProgressForAWatcherWhoseStartRevisionIsAhead) {
  // etcd 3.6's progressIfSync: `rev < w.startRev` answers nothing, so a
  // client that asked to start at R never hears of a revision below R.
  RecordingSink sink;
  int64_t ahead = revision() + 2;
  mvcc::WatchSpec spec{"k", "", ahead, false, false, false};
  spec.progress_from = ahead;
  hub().add(&sink, 1, spec);
  int answers = 0;
  EXPECT_FALSE(hub().if_synced(&sink, 1, [&](int64_t) { ++answers; }));
  EXPECT_FALSE(hub().if_all_synced(&sink, [&](int64_t) { ++answers; }));
  apply({put("x", "1")});  // revision ahead - 1
  EXPECT_FALSE(hub().if_all_synced(&sink, [&](int64_t) { ++answers; }));
  apply({put("x", "2")});  // revision ahead
  int64_t seen = -1;
  EXPECT_TRUE(hub().if_all_synced(&sink, [&](int64_t r) { seen = r; }));
  EXPECT_EQ(seen, ahead);
  EXPECT_EQ(answers, 0);
  hub().remove_all(&sink);
}

TEST_F(WatchHubTest, ReplayGivesNoPrevKvBelowTheCompaction) {
  apply({put("a", "1")});  // r
  int64_t r = revision();
  apply({put("a", "2")});  // r + 1: its previous version is at r
  apply({put("a", "3")});  // r + 2: previous at r + 1
  apply({compact(r + 1)});
  // Right after the compaction: the compactor may not have removed a@r
  // yet, and it must not be sent all the same.
  RecordingSink sink;
  hub().add(&sink, 1, mvcc::WatchSpec{"a", "", r + 1, true, false, false});
  auto evs = sink.wait_events(2);
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[0].kv().mod_revision(), r + 1);
  EXPECT_FALSE(evs[0].has_prev_kv()) << "prev_kv at revision " << r << ", below the compaction at " << r + 1;
  EXPECT_EQ(evs[1].kv().mod_revision(), r + 2);
  ASSERT_TRUE(evs[1].has_prev_kv());  // at the compaction revision: still readable
  EXPECT_EQ(evs[1].prev_kv().value(), "2");
  hub().remove_all(&sink);
}

}  // namespace
}  // namespace etcdq
