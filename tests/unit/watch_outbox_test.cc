// A watch stream's queued responses (server/watch_outbox.h) and its
// watchers (server/stream_watchers.h): events join their watcher's open
// response until a control response, big batches go out in fragments of
// whole events, the bytes held are what all streams' total sees, and ids
// are given as etcd's watch server gives them.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "server/stream_watchers.h"
#include "server/watch_outbox.h"
#include "server/watch_service.h"

namespace etcdq::server {
namespace {

// Events of one revision each, encoded as the hub encodes them.
struct Events {
  std::vector<std::unique_ptr<mvcc::HubEvent>> owned;
  std::vector<mvcc::EventRef> refs;
  void add(int64_t revision, const std::string& key, size_t value_bytes = 8) {
    mvccpb::Event ev;
    ev.mutable_kv()->set_key(key);
    ev.mutable_kv()->set_value(std::string(value_bytes, 'v'));
    ev.mutable_kv()->set_mod_revision(revision);
    owned.push_back(std::make_unique<mvcc::HubEvent>(std::move(ev)));
    owned.back()->encode();
    refs.push_back({owned.back().get(), false});
  }
  mvcc::WatchBatch batch(int64_t watch_id, size_t from, size_t to) const {
    mvcc::WatchBatch b;
    b.watch_id = watch_id;
    b.events = std::span<const mvcc::EventRef>(refs.data() + from, to - from);
    b.revision = refs[to - 1].event->revision();
    return b;
  }
  size_t field_bytes(size_t from, size_t to) const {
    size_t n = 0;
    for (size_t i = from; i < to; ++i) n += event_field_size(refs[i].bytes().size());
    return n;
  }
};

// Writes every queued response, parsed back.
std::vector<etcdserverpb::WatchResponse> write_all(WatchOutbox* o) {
  std::vector<etcdserverpb::WatchResponse> out;
  while (!o->empty()) {
    grpc::ByteBuffer buf = *o->start_write(WireHeader{1, 2, 0, 3});
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(buf.Dump(&slices).ok());
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    o->write_done();
    EXPECT_TRUE(out.emplace_back().ParseFromString(bytes));
  }
  return out;
}

TEST(WatchOutbox, EventsJoinTheirWatchersOpenResponseUntilAControlResponseIsQueued) {
  std::atomic<size_t> total{0};
  WatchOutbox o(&total);
  Events ev;
  for (int64_t r = 1; r <= 3; ++r) ev.add(r, "k" + std::to_string(r));
  uint64_t open = WatchOutbox::kNoResponse;
  o.add_events(ev.batch(7, 0, 1), false, 1 << 20, &open);
  o.add_events(ev.batch(7, 1, 2), false, 1 << 20, &open);
  etcdserverpb::WatchResponse progress;
  progress.set_watch_id(7);
  o.add_control(progress);
  o.add_events(ev.batch(7, 2, 3), false, 1 << 20, &open);
  auto out = write_all(&o);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].events_size(), 2);
  EXPECT_EQ(out[0].header().revision(), 2);  // the last joined revision
  EXPECT_EQ(out[0].header().raft_term(), 3u);
  EXPECT_EQ(out[1].events_size(), 0);  // the control response, as queued
  EXPECT_EQ(out[2].events_size(), 1);  // after it: a response of its own
  EXPECT_EQ(out[2].watch_id(), 7);
}

TEST(WatchOutbox, ABatchPastTheFragmentLimitGoesOutInPartsOfWholeEvents) {
  std::atomic<size_t> total{0};
  WatchOutbox o(&total);
  Events ev;
  for (int i = 0; i < 10; ++i) ev.add(5, "key" + std::to_string(i), 1000);
  uint64_t open = WatchOutbox::kNoResponse;
  const size_t limit = kMaxWirePrefix + 2500;  // two events a part
  o.add_events(ev.batch(1, 0, 10), /*fragment=*/true, limit, &open);
  EXPECT_EQ(open, WatchOutbox::kNoResponse);  // later events start a response of their own
  auto out = write_all(&o);
  ASSERT_EQ(out.size(), 5u);
  int events = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].fragment(), i + 1 < out.size());
    events += out[i].events_size();
  }
  EXPECT_EQ(events, 10);
}

TEST(WatchOutbox, OneBatchOfManyRevisionsIsOneResponseInRevisionOrder) {
  // The hub hands a watcher all of one apply pass's revisions at once.
  std::atomic<size_t> total{0};
  WatchOutbox o(&total);
  Events ev;
  for (int64_t r = 10; r <= 14; ++r) ev.add(r, "k" + std::to_string(r));
  ev.add(14, "k14b");  // a txn: two events of one revision
  uint64_t open = WatchOutbox::kNoResponse;
  o.add_events(ev.batch(3, 0, 6), false, 1 << 20, &open);
  auto out = write_all(&o);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].events_size(), 6);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[0].events(i).kv().mod_revision(), 10 + i);
  EXPECT_EQ(out[0].events(5).kv().key(), "k14b");
  EXPECT_EQ(out[0].header().revision(), 14);
  EXPECT_EQ(out[0].watch_id(), 3);
}

TEST(WatchOutbox, WhatPilesUpWhileTheStreamWritesGoesOutInOneResponseWhenItFrees) {
  std::atomic<size_t> total{0};
  WatchOutbox o(&total);
  Events ev;
  for (int64_t r = 1; r <= 6; ++r) ev.add(r, "k" + std::to_string(r));
  uint64_t open = WatchOutbox::kNoResponse;
  o.add_events(ev.batch(1, 0, 1), false, 1 << 20, &open);
  ASSERT_NE(o.start_write(WireHeader{}), nullptr);  // revision 1 is being written
  // Passes arriving meanwhile, one or two revisions each: none may join
  // the response being written; all join one new response.
  o.add_events(ev.batch(1, 1, 3), false, 1 << 20, &open);
  o.add_events(ev.batch(1, 3, 4), false, 1 << 20, &open);
  o.add_events(ev.batch(1, 4, 6), false, 1 << 20, &open);
  o.write_done();
  auto out = write_all(&o);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].events_size(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[0].events(i).kv().mod_revision(), 2 + i);
  EXPECT_EQ(out[0].header().revision(), 6);
}

TEST(WatchOutbox, ABatchJoinsOnlyWholeWithinTheMergeBoundAndIsSplitOnlyBetweenRevisionsPastTheResponseBound) {
  std::atomic<size_t> total{0};
  WatchOutbox o(&total);
  Events ev;
  ev.add(1, "first");
  ev.add(2, "a", 30 << 10);  // revisions 2 and 3: more than the open response may take
  ev.add(3, "b", 30 << 10);
  ev.add(3, "b2", 30 << 10);
  // Revisions of three events of 100 KiB each: three revisions a response.
  const size_t value = 100 << 10;
  for (int64_t r = 4; r <= 10; ++r) {
    for (int k = 0; k < 3; ++k) ev.add(r, "k" + std::to_string(r) + "." + std::to_string(k), value);
  }
  ev.add(11, "huge", WatchService::kMaxEventsResponseBytes + 100);  // bigger than the bound alone
  ev.add(12, "after");
  const size_t n = ev.refs.size();
  uint64_t open = WatchOutbox::kNoResponse;
  o.add_events(ev.batch(2, 0, 1), false, 1 << 30, &open);
  o.add_events(ev.batch(2, 1, 4), false, 1 << 30, &open);      // 2 and 3 together, not joined to 1
  o.add_events(ev.batch(2, 4, n), false, 1 << 30, &open);      // 4 to 12 at once
  auto out = write_all(&o);
  std::vector<std::vector<int64_t>> revs;
  size_t events = 0;
  for (const auto& r : out) {
    EXPECT_FALSE(r.fragment());
    revs.emplace_back();
    for (const auto& e : r.events()) {
      if (revs.back().empty() || revs.back().back() != e.kv().mod_revision()) revs.back().push_back(e.kv().mod_revision());
    }
    EXPECT_EQ(r.header().revision(), revs.back().back());
    if (revs.back().size() > 1) {
      EXPECT_LE(r.ByteSizeLong(), WatchService::kMaxEventsResponseBytes + kMaxWirePrefix);
    }
    events += static_cast<size_t>(r.events_size());
  }
  EXPECT_EQ(events, n);
  // No revision is in two responses, and parts are whole revisions.
  EXPECT_EQ(revs, (std::vector<std::vector<int64_t>>{{1}, {2, 3}, {4, 5, 6}, {7, 8, 9}, {10}, {11}, {12}}));
}

TEST(WatchOutbox, AFragmentWatchersBatchOfManyRevisionsPastTheLimitIsFragmentedAsOneResponse) {
  // etcd fragments its one catch-up response of many revisions; the
  // client joins the parts into one response again.
  std::atomic<size_t> total{0};
  WatchOutbox o(&total);
  Events ev;
  ev.add(1, "small");
  for (int i = 0; i < 5; ++i) ev.add(2, "big" + std::to_string(i), 1000);
  ev.add(3, "next", 1000);
  ev.add(4, "after");
  const size_t limit = kMaxWirePrefix + 2500;  // two of the big events a part
  uint64_t open = WatchOutbox::kNoResponse;
  o.add_events(ev.batch(4, 0, 7), /*fragment=*/true, limit, &open);
  EXPECT_EQ(open, WatchOutbox::kNoResponse);
  o.add_events(ev.batch(4, 7, 8), /*fragment=*/true, limit, &open);  // fits: a response of its own
  auto out = write_all(&o);
  ASSERT_GE(out.size(), 4u);  // at least three parts, then "after"
  const size_t parts = out.size() - 1;
  std::vector<std::string> keys;
  for (size_t i = 0; i < parts; ++i) {
    EXPECT_EQ(out[i].fragment(), i + 1 < parts) << i;  // the last part ends the fragments
    EXPECT_LE(out[i].ByteSizeLong(), limit);
    EXPECT_EQ(out[i].header().revision(), 3);
    for (const auto& e : out[i].events()) keys.push_back(e.kv().key());
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"small", "big0", "big1", "big2", "big3", "big4", "next"}));
  EXPECT_FALSE(out[parts].fragment());
  ASSERT_EQ(out[parts].events_size(), 1);
  EXPECT_EQ(out[parts].events(0).kv().key(), "after");
}

TEST(WatchOutbox, WhatItHoldsIsAddedToTheTotalAndGivenBackWhenWrittenOrDropped) {
  std::atomic<size_t> total{0};
  {
    WatchOutbox o(&total);
    Events ev;
    ev.add(1, "a");
    ev.add(2, "b");
    o.add_events(ev.batch(1, 0, 1), false, 1 << 20, nullptr);
    o.add_events(ev.batch(2, 1, 2), false, 1 << 20, nullptr);
    EXPECT_EQ(total.load(), o.held_bytes());
    EXPECT_GT(o.held_bytes(), ev.field_bytes(0, 2));  // each response counts its prefix too
    o.start_write(WireHeader{});
    EXPECT_EQ(total.load(), o.held_bytes());  // the write in flight still counts
    o.write_done();
    EXPECT_EQ(total.load(), o.held_bytes());
    o.drop();
    EXPECT_EQ(o.held_bytes(), 0u);
    EXPECT_EQ(total.load(), 0u);
    o.add_events(ev.batch(1, 0, 1), false, 1 << 20, nullptr);
    EXPECT_GT(total.load(), 0u);
    EXPECT_GE(o.peak_bytes(), o.held_bytes());
  }
  EXPECT_EQ(total.load(), 0u);  // a finished stream gives its share back
}

TEST(StreamWatchers, IdsCountFromZeroSkipTakenOnesAndARequestedIdTakenIsADuplicate) {
  StreamWatchers w;
  int64_t id = -1;
  EXPECT_EQ(w.add(0, {}, &id), "");
  EXPECT_EQ(id, 0);
  EXPECT_EQ(w.add(2, {}, &id), "");
  EXPECT_EQ(id, 2);
  EXPECT_EQ(w.add(0, {}, &id), "");
  EXPECT_EQ(id, 1);
  EXPECT_EQ(w.add(0, {}, &id), "");
  EXPECT_EQ(id, 3);  // 2 is taken
  EXPECT_EQ(w.add(2, {}, &id), "mvcc: duplicate watch ID provided on the WatchStream");
  EXPECT_TRUE(w.remove(2));
  EXPECT_FALSE(w.remove(2));
  EXPECT_EQ(w.add(2, StreamWatchers::Watcher{false, true}, &id), "");
  EXPECT_EQ(w.progress_notify_ids(), std::vector<int64_t>{2});
}

}  // namespace
}  // namespace etcdq::server
