// A member's state replaced by another's snapshot (Applier::restore, fed
// by member::stream_state as Peer.FetchSnapshot does): exactly the state
// when the stream began, with the member's own identity kept, and nothing
// changed when the source cannot be read.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <thread>

#include "apply/entry.h"
#include "apply/kv.h"
#include "apply/state_machine.h"
#include "etcdq/command.pb.h"
#include "member/fsm.h"
#include "mvcc/codec.h"
#include "mvcc/store.h"
#include "storage/batch.h"
#include "storage/engine.h"
#include "state_dump.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;

// One member's state machine on its own temporary database.
struct Member {
  explicit Member(const fs::path& dir) : dir(dir) {
    EXPECT_FALSE(apply::StateMachine::open((dir / "db").string(), {}, &state));
    engine = state->engine();
    store = state->store();
    applier = state->applier();
    index = applier->applied_index();
  }

  void apply(apply::Command c) {
    std::string entry;
    apply::append_framed(&entry, c.SerializeAsString());
    apply::pad_entry(&entry);
    std::vector<apply::Result> results;
    ASSERT_FALSE(applier->apply(++index, entry, &results));
    ASSERT_FALSE(results.at(0).error) << results.at(0).error.message();
  }
  void put(const std::string& k, const std::string& v, int64_t lease = 0) {
    apply::Command c;
    c.mutable_put()->set_key(k);
    c.mutable_put()->set_value(v);
    c.mutable_put()->set_lease(lease);
    apply(c);
  }
  etcdserverpb::RangeResponse all(int64_t rev = 0) {
    etcdserverpb::RangeRequest r;
    r.set_key(std::string(1, '\0'));
    r.set_range_end(std::string(1, '\0'));
    r.set_revision(rev);
    etcdserverpb::RangeResponse resp;
    auto view = store->view();
    apply::ViewState s(*view);
    last_error = apply::range(s, r, &resp);
    return resp;
  }
  std::string meta(const std::string& key) {
    std::string v;
    engine->get(storage::Cf::kMeta, key, &v);
    return v;
  }

  fs::path dir;
  std::unique_ptr<apply::StateMachine> state;
  storage::Engine* engine = nullptr;
  mvcc::Store* store = nullptr;
  apply::Applier* applier = nullptr;
  uint64_t index = 0;
  Error last_error;
};

class SnapshotRestore : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("etcdq-restore-" + std::to_string(std::random_device{}()));
    fs::create_directories(root_ / "a");
    fs::create_directories(root_ / "b");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(SnapshotRestore, ReplacesTheStateWithTheStreamedOneAndKeepsIdentity) {
  Member a(root_ / "a");
  a.put("/k/1", "one");
  a.put("/k/2", "two");
  a.put("/k/1", "uno");
  apply::Command grant;
  grant.mutable_lease_grant()->set_id(0x1234);
  grant.mutable_lease_grant()->set_ttl(60);
  a.apply(grant);
  a.put("/leased", "x", 0x1234);
  apply::Command publish;
  publish.mutable_member_attributes()->set_id(7);
  publish.mutable_member_attributes()->set_name("m7");
  publish.mutable_member_attributes()->add_client_urls("http://127.0.0.1:1");
  publish.mutable_member_attributes()->set_cluster_id(99);
  a.apply(publish);
  apply::Command compact;
  compact.mutable_compaction()->set_revision(3);
  a.apply(compact);

  uint64_t snap_index = a.applier->applied_index();
  int64_t snap_rev = a.applier->revision();

  Member b(root_ / "b");
  b.put("/old/only/on/b", "gone after restore");
  storage::Batch id(b.engine);
  id.put(storage::Cf::kMeta, "member_id", "BBBBBBBB");
  ASSERT_FALSE(b.engine->write(id));
  auto old_view = b.store->view();  // a reader in the middle of the restore

  bool damaged = true;
  bool wrote_after = false;
  Error e = b.applier->restore(
      [&](const apply::Applier::PairSink& sink) {
        return member::stream_state(a.engine, snap_index,
                                    [&](storage::Cf cf, std::string_view key, std::string_view value) {
                                      // A writes on while it streams: the stream is the state it began at.
                                      if (!wrote_after) {
                                        wrote_after = true;
                                        a.put("/after", "not in the snapshot");
                                      }
                                      return sink(cf, key, value);
                                    });
      },
      &damaged);
  ASSERT_FALSE(e) << e.message();
  EXPECT_FALSE(damaged);
  EXPECT_EQ(b.applier->applied_index(), snap_index);
  EXPECT_EQ(b.applier->revision(), snap_rev);

  auto got = b.all();
  ASSERT_EQ(got.kvs_size(), 3);
  EXPECT_EQ(got.kvs(0).key(), "/k/1");
  EXPECT_EQ(got.kvs(0).value(), "uno");
  EXPECT_EQ(got.kvs(0).version(), 2);
  EXPECT_EQ(got.kvs(1).key(), "/k/2");
  EXPECT_EQ(got.kvs(2).key(), "/leased");
  EXPECT_EQ(got.kvs(2).lease(), 0x1234);
  EXPECT_EQ(b.store->view()->compact_revision(), 3);
  b.all(2);
  EXPECT_EQ(b.last_error, errors::compacted());
  EXPECT_TRUE(b.state->lessor()->exists(0x1234));
  ASSERT_TRUE(b.state->members()->get(7).has_value());
  EXPECT_EQ(b.state->members()->get(7)->name(), "m7");
  EXPECT_EQ(b.state->members()->cluster_id(), 99u);
  EXPECT_EQ(b.meta("member_id"), "BBBBBBBB");  // B's own identity stays

  // The reader that held the old view still sees the old state.
  etcdserverpb::RangeRequest r;
  r.set_key("/old/only/on/b");
  etcdserverpb::RangeResponse resp;
  apply::ViewState s(*old_view);
  ASSERT_FALSE(apply::range(s, r, &resp));
  EXPECT_EQ(resp.kvs_size(), 1);

  // Applying goes on from the snapshot's index.
  b.index = snap_index;
  b.put("/next", "v");
  EXPECT_EQ(b.applier->revision(), snap_rev + 1);
}

TEST_F(SnapshotRestore, AnUnreachableSourceChangesNothing) {
  Member b(root_ / "b");
  b.put("/kept", "v");
  uint64_t applied = b.applier->applied_index();
  bool damaged = true;
  Error e = b.applier->restore(
      [](const apply::Applier::PairSink&) { return errors::internal("cannot connect"); }, &damaged);
  EXPECT_TRUE(e);
  EXPECT_FALSE(damaged);
  EXPECT_EQ(b.applier->applied_index(), applied);
  EXPECT_EQ(b.all().kvs_size(), 1);
}

// A's state as a peer would stream it, with the applied index's value
// replaced by `applied` (what a faulty or hostile sender could send).
Error restore_with_applied(Member& a, Member& b, const std::string& applied, bool* damaged) {
  return b.applier->restore(
      [&](const apply::Applier::PairSink& sink) {
        return member::stream_state(a.engine, 0, [&](storage::Cf cf, std::string_view key, std::string_view value) {
          if (cf == storage::Cf::kMeta && key == mvcc::kMetaAppliedIndex) return sink(cf, key, applied);
          return sink(cf, key, value);
        });
      },
      damaged);
}

TEST_F(SnapshotRestore, AMalformedAppliedIndexIsRefusedAndTheStateStays) {
  // decode_i64 read a 1-byte index as 0: the member applied the log's
  // entries again on top of the state (attack4).
  Member a(root_ / "a");
  for (int i = 0; i < 5; ++i) a.put("/k/" + std::to_string(i), "v");
  Member b(root_ / "b");
  b.put("/old", "v");
  const uint64_t b_applied = b.applier->applied_index();
  for (const std::string& applied : {std::string(1, '\x05'), std::string(8, '\0')}) {
    bool damaged = true;
    Error e = restore_with_applied(a, b, applied, &damaged);
    ASSERT_TRUE(e);
    EXPECT_TRUE(e.message().find("the snapshot's applied index is") != std::string::npos) << e.message();
    // Refused before anything was ingested, and the state in use stays.
    EXPECT_FALSE(damaged);
    std::string v;
    EXPECT_FALSE(b.engine->get(storage::Cf::kLatest, "/k/0", &v));
    EXPECT_EQ(b.applier->applied_index(), b_applied);
    EXPECT_EQ(b.all().kvs_size(), 1);
  }
}

TEST_F(SnapshotRestore, AStateBehindTheSnapshotIsAnError) {
  // A member that lags the snapshot's index cannot serve it: the installer
  // asks another (consensus/snapshot_install.h).
  Member a(root_ / "a");
  a.put("/k", "v");
  int pairs = 0;
  Error e = member::stream_state(a.engine, a.applier->applied_index() + 1,
                                 [&](storage::Cf, std::string_view, std::string_view) {
                                   ++pairs;
                                   return Error();
                                 });
  EXPECT_TRUE(e);
  EXPECT_EQ(pairs, 0);
}


// Every pair of `cf` in `engine`, as text, but the member's own meta pairs.
std::string dump_cf(storage::Engine* engine, storage::Cf cf) {
  std::string out;
  storage::Iterator it = engine->iterator(cf);
  for (it.seek_to_first(); it.valid(); it.next()) {
    std::string key(it.key());
    if (cf == storage::Cf::kMeta && (key == "member_id" || key == "cluster_id" || key == "restored_index" ||
                                     key == mvcc::kMetaLogFloor)) {
      continue;
    }
    out += ::testing::PrintToString(key) + " = " + ::testing::PrintToString(std::string(it.value())) + "\n";
  }
  return out;
}

// A state with what the rebuilt latest must get right: overwritten keys, a
// deleted one, one deleted and put again, a Txn's changes at one revision
// (sub revisions), a leased key, keys with 00 bytes (escaped in history),
// and a finished compaction (versions kept below it, tombstones gone).
void write_varied_state(Member& a) {
  a.put("/k/1", "one");
  a.put("/k/2", "two");
  a.put(std::string("/z\0a", 4), "zero byte");
  a.put(std::string("/z\0", 3), "ends in zero");
  a.put("/k/1", "uno");
  apply::Command del;
  del.mutable_delete_range()->set_key("/k/2");
  a.apply(del);
  a.put("/gone", "x");
  apply::Command del2;
  del2.mutable_delete_range()->set_key("/gone");
  a.apply(del2);
  apply::Command compact;
  compact.mutable_compaction()->set_revision(a.applier->revision() - 1);
  a.apply(compact);
  apply::Command txn;
  for (const char* k : {"/t/a", "/t/b", "/k/1"}) {
    auto* put = txn.mutable_txn()->add_success()->mutable_request_put();
    put->set_key(k);
    put->set_value(std::string("in txn ") + k);
  }
  txn.mutable_txn()->add_success()->mutable_request_delete_range()->set_key(std::string("/z\0", 3));
  a.apply(txn);
  apply::Command grant;
  grant.mutable_lease_grant()->set_id(0x77);
  grant.mutable_lease_grant()->set_ttl(60);
  a.apply(grant);
  a.put("/leased", "l", 0x77);
  a.put("/k/2", "two again");
  // The compactor runs on its own thread: wait until it finished, so that
  // the sender's revlog is final.
  const std::string want = mvcc::encode_i64(a.store->view()->compact_revision());
  for (int i = 0; i < 500 && a.meta(std::string(mvcc::kMetaCompactFinished)) != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(a.meta(std::string(mvcc::kMetaCompactFinished)), want);
}

Error restore_parts(Member& a, Member& b, member::StateParts parts, int* pairs) {
  bool damaged = true;
  Error e = b.applier->restore(
      [&](const apply::Applier::PairSink& sink) {
        return member::stream_state(
            a.engine, 0,
            [&](storage::Cf cf, std::string_view key, std::string_view value) {
              ++*pairs;
              return sink(cf, key, value);
            },
            parts);
      },
      &damaged);
  EXPECT_FALSE(damaged);
  return e;
}

TEST_F(SnapshotRestore, LatestIsRebuiltFromHistoryExactly) {
  // The installer asks for every column family but latest and rebuilds it
  // from history (mvcc/derive.h): the result must be the sender's state
  // byte for byte, as when every family is sent (an older sender).
  Member a(root_ / "a");
  write_varied_state(a);
  fs::create_directories(root_ / "c");
  Member b(root_ / "b");
  Member c(root_ / "c");
  b.put("/old/only/on/b", "gone after restore");
  int without_latest_pairs = 0, all_pairs = 0;
  ASSERT_FALSE(restore_parts(a, b, member::StateParts::kAllButLatest, &without_latest_pairs));
  ASSERT_FALSE(restore_parts(a, c, member::StateParts::kAll, &all_pairs));
  EXPECT_EQ(all_pairs - without_latest_pairs, a.store->keys());  // the live keys' pairs stayed home
  for (int cf = 0; cf < storage::kCfCount; ++cf) {
    const auto f = static_cast<storage::Cf>(cf);
    EXPECT_EQ(dump_cf(b.engine, f), dump_cf(a.engine, f)) << storage::kCfNames[cf];
    EXPECT_EQ(dump_cf(c.engine, f), dump_cf(a.engine, f)) << storage::kCfNames[cf];
  }
  EXPECT_EQ(testing::state_dump(*b.store), testing::state_dump(*a.store));
  EXPECT_EQ(b.store->keys(), a.store->keys());
  // And it works on: a watch's replay reads revlog, a put reads latest.
  b.index = b.applier->applied_index();
  b.put("/k/1", "after");
  auto got = b.all();
  ASSERT_GE(got.kvs_size(), 1);
  EXPECT_EQ(got.kvs(0).key(), "/k/1");
  EXPECT_EQ(got.kvs(0).version(), 4);
}

// A's state streamed with each history pair passed through `change`
// (what a faulty or hostile sender could send).
Error restore_with_history(Member& a, Member& b,
                           const std::function<void(std::string* key, std::string* value)>& change) {
  bool damaged = true;
  return b.applier->restore(
      [&](const apply::Applier::PairSink& sink) {
        return member::stream_state(
            a.engine, 0,
            [&](storage::Cf cf, std::string_view key, std::string_view value) {
              if (cf != storage::Cf::kHistory) return sink(cf, key, value);
              std::string k(key), v(value);
              change(&k, &v);
              return sink(cf, k, v);
            },
            member::StateParts::kAllButLatest);
      },
      &damaged);
}

TEST_F(SnapshotRestore, AMalformedHistoryPairIsRefusedAndTheStateStays) {
  Member a(root_ / "a");
  for (int i = 0; i < 5; ++i) a.put("/k/" + std::to_string(i), "v");
  Member b(root_ / "b");
  b.put("/old", "v");
  const std::string before = testing::state_dump(*b.store);
  const std::vector<std::pair<std::string, std::function<void(std::string*, std::string*)>>> faults = {
      {"malformed history key", [](std::string* k, std::string*) { k->resize(k->size() - 3); }},
      {"neither a put nor a tombstone", [](std::string*, std::string* v) { (*v)[0] = 'X'; }},
      {"too short", [](std::string*, std::string* v) { v->resize(5); }},
  };
  for (const auto& [want, change] : faults) {
    Error e = restore_with_history(a, b, change);
    ASSERT_TRUE(e) << want;
    EXPECT_NE(e.message().find(want), std::string::npos) << e.message();
    EXPECT_EQ(testing::state_dump(*b.store), before) << want;
  }
}

}  // namespace
}  // namespace etcdq
