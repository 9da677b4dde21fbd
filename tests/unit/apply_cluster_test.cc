// Three members in one process, without sockets: libraft's own test fixture
// (raft/fixture.h: in-memory log and network, time and partitions decided by
// the test) drives etcdq's state machine (apply::Applier on a real RocksDB
// per member). It proves the apply chain keeps members equal whatever the
// log holds — a peer with a bad build that gets a badly framed or
// undecodable command committed stops no member and changes every member
// the same way — and across a partitioned, deposed leader.
#include <gtest/gtest.h>

extern "C" {
#include <raft.h>
#include <raft/fixture.h>
}

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apply/entry.h"
#include "apply/kv.h"
#include "apply/state_machine.h"
#include "etcdq/command.pb.h"
#include "mvcc/store.h"
#include "state_dump.h"
#include "storage/engine.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;

constexpr unsigned kMembers = 3;
using ApplyReq = struct raft_apply;  // raft_apply is also a function's name

// One member's state machine on its own temporary database, as libraft's FSM.
struct Member {
  explicit Member(const fs::path& dir) {
    fs::create_directories(dir);
    EXPECT_FALSE(apply::StateMachine::open((dir / "db").string(), {}, &sm));
    store = sm->store();
    applier = sm->applier();
    fsm.version = 1;
    fsm.data = this;
    fsm.apply = [](struct raft_fsm* f, const struct raft_buffer* buf, void** result) -> int {
      auto* self = static_cast<Member*>(f->data);
      *result = nullptr;
      std::vector<apply::Result> results;
      // As consensus/node.cc: the entry's index is the next one to apply.
      Error e = self->applier->apply(self->applier->applied_index() + 1,
                                     std::string_view(static_cast<const char*>(buf->base), buf->len), &results);
      if (e) {
        ++self->apply_failures;  // consensus/node.cc would stop the member here
        return RAFT_IOERR;
      }
      for (auto& r : results) self->errors += r.error ? 1 : 0;
      return 0;
    };
    fsm.snapshot = nullptr;
    fsm.restore = nullptr;
  }

  // Every key with its revisions and value, and the store's revision.
  std::string state() { return testing::state_dump(*store); }

  std::unique_ptr<apply::StateMachine> sm;
  mvcc::Store* store = nullptr;
  apply::Applier* applier = nullptr;
  struct raft_fsm fsm {};
  int apply_failures = 0;
  int errors = 0;  // commands that applied as an error result (state unchanged)
};

std::string put_command(const std::string& key, const std::string& value) {
  apply::Command c;
  c.mutable_put()->set_key(key);
  c.mutable_put()->set_value(value);
  return c.SerializeAsString();
}

class ApplyClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("etcdq-apply-cluster-" + std::to_string(rd()));
    fs::create_directories(dir_);
    ASSERT_EQ(raft_fixture_initialize(&f_), 0);
    for (unsigned i = 0; i < kMembers; ++i) {
      members_.push_back(std::make_unique<Member>(dir_ / std::to_string(i)));
      ASSERT_EQ(raft_fixture_grow(&f_, &members_.back()->fsm), 0);
    }
    struct raft_configuration conf;
    ASSERT_EQ(raft_fixture_configuration(&f_, kMembers, &conf), 0);
    ASSERT_EQ(raft_fixture_bootstrap(&f_, &conf), 0);
    raft_configuration_close(&conf);
    ASSERT_EQ(raft_fixture_start(&f_), 0);
    raft_fixture_elect(&f_, 0);
  }
  void TearDown() override {
    raft_fixture_close(&f_);
    members_.clear();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Proposes one log entry holding `payload` (framed commands) on the
  // current leader; false if libraft refused it.
  bool propose(std::string payload) {
    apply::pad_entry(&payload);
    struct raft* leader = raft_fixture_get(&f_, raft_fixture_leader_index(&f_));
    auto* req = new ApplyReq{};
    struct raft_buffer buf;
    buf.len = payload.size();
    buf.base = raft_malloc(buf.len);
    std::memcpy(buf.base, payload.data(), buf.len);
    int rv = raft_apply(leader, req, &buf, 1, [](ApplyReq* r, int, void*) { delete r; });
    if (rv != 0) {
      raft_free(buf.base);
      delete req;
      return false;
    }
    return true;
  }
  bool propose_commands(const std::vector<std::string>& commands) {
    std::string entry;
    for (const auto& c : commands) apply::append_framed(&entry, c);
    return propose(std::move(entry));
  }

  // Steps until every live member applied the leader's last index.
  void settle() {
    unsigned l = raft_fixture_leader_index(&f_);
    ASSERT_LT(l, kMembers);
    raft_index last = raft_last_index(raft_fixture_get(&f_, l));
    for (unsigned i = 0; i < kMembers; ++i) {
      if (!raft_fixture_alive(&f_, i)) continue;
      ASSERT_TRUE(raft_fixture_step_until_applied(&f_, i, last, 10000)) << "member " << i;
    }
  }

  void expect_equal_states() {
    std::string first = members_[0]->state();
    for (unsigned i = 1; i < kMembers; ++i) EXPECT_EQ(members_[i]->state(), first) << "member " << i;
    for (const auto& m : members_) EXPECT_EQ(m->apply_failures, 0);
  }

  fs::path dir_;
  struct raft_fixture f_ {};
  std::vector<std::unique_ptr<Member>> members_;
};

TEST_F(ApplyClusterTest, CommittedCommandsLeaveEveryMemberWithTheSameRevisionsAndValues) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(propose_commands({put_command("k" + std::to_string(i % 7), "v" + std::to_string(i)),
                                  put_command("other", std::to_string(i))}));
  }
  settle();
  expect_equal_states();
  EXPECT_NE(members_[0]->state().find("rev=41"), std::string::npos) << members_[0]->state();
}

TEST_F(ApplyClusterTest, BadlyFramedEntryFromABadBuildStopsNoMemberAndChangesEveryMemberAlike) {
  ASSERT_TRUE(propose_commands({put_command("before", "1")}));
  // A good command, then a frame whose length runs past the entry: what a
  // peer with a bad build could get committed.
  std::string entry;
  apply::append_framed(&entry, put_command("same-entry", "kept"));
  uint32_t bogus = 1u << 30;
  entry.append(reinterpret_cast<const char*>(&bogus), 4);
  entry.append("junk");
  ASSERT_TRUE(propose(entry));
  ASSERT_TRUE(propose_commands({put_command("after", "1")}));
  settle();
  expect_equal_states();
  std::string s = members_[1]->state();
  EXPECT_NE(s.find("before=1"), std::string::npos) << s;
  EXPECT_NE(s.find("same-entry=kept"), std::string::npos) << s;
  EXPECT_NE(s.find("after=1"), std::string::npos) << s;
}

TEST_F(ApplyClusterTest, UndecodableAndEmptyCommandsApplyAsErrorsOnEveryMember) {
  apply::Command empty;  // no request (a zero-length frame would end the entry)
  empty.set_origin(42);
  ASSERT_TRUE(propose_commands({std::string("\xff\xff\xff\xff\x0f", 5), empty.SerializeAsString(),
                                put_command("ok", "1")}));
  settle();
  expect_equal_states();
  for (const auto& m : members_) EXPECT_EQ(m->errors, 2);
  EXPECT_NE(members_[2]->state().find("ok=1"), std::string::npos);
}

TEST_F(ApplyClusterTest, PartitionedLeaderIsDeposedAndEveryMemberConvergesAfterTheHeal) {
  ASSERT_TRUE(propose_commands({put_command("a", "1")}));
  settle();
  unsigned old = raft_fixture_leader_index(&f_);
  // Cut the leader off; what it proposes alone never commits.
  for (unsigned i = 0; i < kMembers; ++i) {
    if (i != old) {
      raft_fixture_saturate(&f_, old, i);
      raft_fixture_saturate(&f_, i, old);
    }
  }
  ASSERT_TRUE(propose_commands({put_command("lost", "x")}));
  ASSERT_TRUE(raft_fixture_step_until_has_no_leader(&f_, 10000));
  ASSERT_TRUE(raft_fixture_step_until_has_leader(&f_, 10000));
  ASSERT_NE(raft_fixture_leader_index(&f_), old);
  ASSERT_TRUE(propose_commands({put_command("b", "2")}));
  for (unsigned i = 0; i < kMembers; ++i) {
    if (i != old) {
      raft_fixture_desaturate(&f_, old, i);
      raft_fixture_desaturate(&f_, i, old);
    }
  }
  ASSERT_TRUE(propose_commands({put_command("c", "3")}));
  settle();
  expect_equal_states();
  std::string s = members_[old]->state();
  EXPECT_EQ(s.find("lost="), std::string::npos) << s;
  EXPECT_NE(s.find("b=2"), std::string::npos) << s;
  EXPECT_NE(s.find("c=3"), std::string::npos) << s;
}

}  // namespace
}  // namespace etcdq
