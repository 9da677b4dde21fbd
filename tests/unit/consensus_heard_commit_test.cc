// A follower that hears of a commit while it is still writing the entry
// applies it once the write completes (consensus/libraft_patches.h, patch
// 10), on libraft's own in-memory cluster (raft/fixture.h) with the hooks
// where consensus::Node puts them: after each message libraft receives
// (consensus/leadership.cc, recv_hook) and after each append's completion
// libraft is told of (consensus/log_appends.cc). The leader tells its
// followers a commit at once (patch 9, send_commit_now), as on_applied does.
#include <gtest/gtest.h>

extern "C" {
#include <raft.h>
#include <raft/fixture.h>
}

#include <cstring>
#include <limits>
#include <map>

#include "consensus/libraft_patches.h"

namespace {

using etcdq::consensus::HeardCommit;

// What the hooks need per server, found by libraft's raft_io.
struct HcHooks {
  struct raft* raft = nullptr;
  HeardCommit heard;
  bool on = true;  // false: libraft 0.15 alone
  raft_io_recv_cb recv = nullptr;
  int (*start)(struct raft_io*, unsigned, raft_io_tick_cb, raft_io_recv_cb) = nullptr;
  int (*append)(struct raft_io*, struct raft_io_append*, const struct raft_entry[], unsigned,
                raft_io_append_cb) = nullptr;
};
std::map<struct raft_io*, HcHooks*> hc_hooks;
std::map<struct raft_io_append*, std::pair<HcHooks*, raft_io_append_cb>> hc_appends;

void hc_recv(struct raft_io* io, struct raft_message* m) {
  HcHooks* h = hc_hooks.at(io);
  HeardCommit::Vouch v = HeardCommit::vouch_of(*m);
  h->recv(io, m);
  if (!h->on) return;
  h->heard.heard(h->raft, v);
  h->heard.apply(h->raft);
}

int hc_start(struct raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv) {
  HcHooks* h = hc_hooks.at(io);
  h->recv = recv;
  return h->start(io, msecs, tick, hc_recv);
}

void hc_appended(struct raft_io_append* req, int status) {
  auto [h, cb] = hc_appends.at(req);
  hc_appends.erase(req);
  cb(req, status);
  if (h->on) h->heard.apply(h->raft);
}

int hc_append(struct raft_io* io, struct raft_io_append* req, const struct raft_entry entries[], unsigned n,
                  raft_io_append_cb cb) {
  HcHooks* h = hc_hooks.at(io);
  hc_appends[req] = {h, cb};
  return h->append(io, req, entries, n, hc_appended);
}

int hc_fsm_apply(struct raft_fsm*, const struct raft_buffer*, void** result) {
  *result = nullptr;
  return 0;
}

class HcThreeMembers {
 public:
  // Member 0 leads; member 2's disk takes `slow_disk_ms` an append (the
  // others 10 ms, messages 15 ms: the fixture's defaults).
  HcThreeMembers(bool patched, unsigned slow_disk_ms) {
    std::memset(&f_, 0, sizeof f_);
    EXPECT_EQ(raft_fixture_initialize(&f_), 0);
    for (auto& fsm : fsms_) {
      std::memset(&fsm, 0, sizeof fsm);
      fsm.version = 1;
      fsm.apply = hc_fsm_apply;
      EXPECT_EQ(raft_fixture_grow(&f_, &fsm), 0);
    }
    struct raft_configuration conf;
    EXPECT_EQ(raft_fixture_configuration(&f_, 3, &conf), 0);
    EXPECT_EQ(raft_fixture_bootstrap(&f_, &conf), 0);
    raft_configuration_close(&conf);
    for (unsigned i = 0; i < 3; ++i) {
      struct raft* r = raft_fixture_get(&f_, i);
      hooks_[i].raft = r;
      hooks_[i].on = patched;
      hooks_[i].start = r->io->start;
      hooks_[i].append = r->io->append;
      r->io->start = hc_start;
      r->io->append = hc_append;
      hc_hooks[r->io] = &hooks_[i];
    }
    EXPECT_EQ(raft_fixture_start(&f_), 0);
    raft_fixture_elect(&f_, 0);
    raft_fixture_set_disk_latency(&f_, 2, slow_disk_ms);
  }
  ~HcThreeMembers() {
    raft_fixture_close(&f_);
    hc_hooks.clear();
    hc_appends.clear();
  }

  struct raft* member(unsigned i) { return raft_fixture_get(&f_, i); }

  // Proposes one entry on the leader; returns its index.
  raft_index propose() {
    struct raft_buffer buf;
    buf.len = 8;
    buf.base = raft_malloc(buf.len);
    std::memset(buf.base, 0, buf.len);
    EXPECT_EQ(raft_apply(member(0), &req_, &buf, 1, nullptr), 0);
    return raft_last_index(member(0));
  }

  // Steps the cluster one event at a time until pred() holds, for at most
  // `ms` of the fixture's time.
  template <typename Pred>
  bool step_until(Pred pred, raft_time ms) {
    raft_time end = raft_fixture_time(&f_) + ms;
    while (!pred()) {
      if (raft_fixture_time(&f_) > end) return false;
      raft_fixture_step(&f_);
    }
    return true;
  }

 private:
  struct raft_fixture f_;
  struct raft_fsm fsms_[3];
  HcHooks hooks_[3];
  struct raft_apply req_ {};
};

// The race of issue #37: the leader commits on its own write and member 1's,
// and tells both followers at once; member 2 gets that while its write of
// the entry is still going on.
void hc_run_race(HcThreeMembers& c, raft_index* index) {
  // Settle whatever the election left in flight.
  ASSERT_TRUE(c.step_until([&] { return raft_last_applied(c.member(2)) == raft_last_index(c.member(0)); }, 2000));
  raft_index e = c.propose();
  *index = e;
  ASSERT_TRUE(c.step_until([&] { return c.member(0)->commit_index >= e; }, 1000));
  ASSERT_LT(c.member(2)->last_stored, e) << "member 2 must still be writing the entry";
  etcdq::consensus::send_commit_now(c.member(0));
  // Member 2 finishes its write after the commit message arrived.
  ASSERT_TRUE(c.step_until([&] { return c.member(2)->last_stored >= e; }, 1000));
}

TEST(ConsensusHeardCommit, OriginalFollowerLosesACommitHeardWhileItWasWritingTheEntry) {
  // What patch 10 corrects: libraft 0.15 alone cuts the commit to what was
  // stored and, once the write is done, uses only the older commit of the
  // append that brought the entry. A libraft that keeps it makes the
  // patch stale: this fails.
  HcThreeMembers c(/*patched=*/false, /*slow_disk_ms=*/60);
  raft_index e = 0;
  hc_run_race(c, &e);
  EXPECT_LT(c.member(2)->commit_index, e);
  EXPECT_LT(raft_last_applied(c.member(2)), e);
}

TEST(ConsensusHeardCommit, FollowerAppliesACommitHeardWhileItWasWritingTheEntryOnceWritten) {
  HcThreeMembers c(/*patched=*/true, /*slow_disk_ms=*/60);
  raft_index e = 0;
  hc_run_race(c, &e);
  EXPECT_EQ(c.member(2)->commit_index, e);
  EXPECT_EQ(raft_last_applied(c.member(2)), e);
}

TEST(ConsensusHeardCommit, FollowerNeverCommitsBeyondWhatItStored) {
  // The commit was heard before the entry was stored: nothing above the
  // stored log is applied on its strength.
  HcThreeMembers c(/*patched=*/true, /*slow_disk_ms=*/60);
  ASSERT_TRUE(c.step_until([&] { return raft_last_applied(c.member(2)) == raft_last_index(c.member(0)); }, 2000));
  raft_index e = c.propose();
  ASSERT_TRUE(c.step_until([&] { return c.member(0)->commit_index >= e; }, 1000));
  etcdq::consensus::send_commit_now(c.member(0));
  ASSERT_TRUE(c.step_until([&] { return c.member(2)->commit_index >= e || c.member(2)->last_stored >= e; }, 1000));
  EXPECT_LE(c.member(2)->commit_index, c.member(2)->last_stored);
}

TEST(ConsensusHeardCommit, AVouchForAnEntryThisLogDoesNotHoldCommitsNothing) {
  // A peer's AppendEntries is hostile until checked: one that names an
  // index past this log with term 0 (logTermOf's answer for an absent
  // index), or whose index overflows, must not commit what is stored but
  // not yet committed.
  HcThreeMembers c(/*patched=*/true, /*slow_disk_ms=*/10);
  ASSERT_TRUE(c.step_until([&] { return raft_last_applied(c.member(2)) == raft_last_index(c.member(0)); }, 2000));
  struct raft* f = c.member(2);
  raft_index committed = f->commit_index;
  HeardCommit h;
  HeardCommit::Vouch past_end;
  past_end.term = f->current_term;
  past_end.match_index = f->last_stored + 1000;
  past_end.match_term = 0;
  past_end.commit = f->last_stored + 1000;
  f->commit_index = committed - 1;  // as if the last stored entry were not committed yet
  h.heard(f, past_end);
  h.apply(f);
  EXPECT_EQ(f->commit_index, committed - 1);
  f->commit_index = committed;

  struct raft_entry e {};
  e.term = f->current_term;
  e.type = RAFT_COMMAND;
  struct raft_message m {};
  m.type = RAFT_IO_APPEND_ENTRIES;
  m.append_entries.term = f->current_term;
  m.append_entries.prev_log_index = std::numeric_limits<raft_index>::max();
  m.append_entries.prev_log_term = f->current_term;
  m.append_entries.leader_commit = std::numeric_limits<raft_index>::max();
  m.append_entries.entries = &e;
  m.append_entries.n_entries = 1;
  HeardCommit::Vouch wrapped = HeardCommit::vouch_of(m);
  EXPECT_EQ(wrapped.term, 0U);
  EXPECT_EQ(wrapped.commit, 0U);
}

}  // namespace
