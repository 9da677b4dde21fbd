// Libraft's snapshot hooks and installing another member's state.
// On the consensus thread (consensus/node_impl.h).
#include "consensus/metrics.h"
#include "consensus/node_impl.h"

#include <cstdlib>
#include <cstring>
#include <map>

#include "common/entry_frames.h"
#include "consensus/snapshot_install.h"

namespace etcdq::consensus {

InstallPlan Node::Impl::install_plan(const consensus::SnapshotMeta& meta) {
  InstallPlan plan;
  plan.min_index = meta.applied_index();
  auto add = [&](const std::string& t) {
    if (!t.empty() && std::find(plan.targets.begin(), plan.targets.end(), t) == plan.targets.end()) {
      plan.targets.push_back(t);
    }
  };
  // The state is fetched over the Peer service on peer URLs: the taker's
  // first, then the leader's, then every other member's.
  add(peer_target(meta.source_member()));
  add(leader_target());
  for (unsigned i = 0; i < raft.configuration.n; ++i) {
    const auto& srv = raft.configuration.servers[i];
    if (srv.id != raft.id && srv.address != nullptr) add(srv.address);
  }
  return plan;
}

// Which member each target is, for the receive series' From label.
std::function<uint64_t(const std::string&)> Node::Impl::member_at() {
  std::map<std::string, uint64_t> members;
  for (unsigned i = 0; i < raft.configuration.n; ++i) {
    const auto& srv = raft.configuration.servers[i];
    if (srv.address != nullptr) members.emplace(srv.address, srv.id);
  }
  return [members = std::move(members)](const std::string& address) {
    auto it = members.find(address);
    return it == members.end() ? uint64_t{0} : it->second;
  };
}

// libraft calls fsm_restore only once it stored the snapshot (its metadata
// written and synced, the log dropped): the transfer starts as the message
// arrives, beside that (consensus/state_prefetch.h). The checks here only
// save a useless transfer; libraft and fsm_restore decide what is installed.
void Node::Impl::prefetch_state(const struct raft_message& msg) {
  const struct raft_install_snapshot& is = msg.install_snapshot;
  if (is.term < raft.current_term || index_of(msg.server_id) < 0) return;  // libraft refuses it
  std::string_view rest(static_cast<const char*>(is.data.base), is.data.len), bytes;
  bool corrupt = false;
  consensus::SnapshotMeta meta;
  if (!next_framed(&rest, &bytes, &corrupt) || !meta.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return;  // fsm_restore stops the member on it
  }
  if (meta.applied_index() <= sm->applied_index()) return;  // nothing to fetch
  // libraft (replication.c, replicationInstallSnapshot) ignores it while
  // taking or storing a snapshot, and takes it as a no-op when its log
  // holds the snapshot's index already: a member that resumed after a pause
  // reads the appends queued meanwhile first, and often catches up from
  // them (a transfer started then only took CPU from it).
  if (raft.snapshot.pending.term != 0 || raft.snapshot.put.data != nullptr) return;  // RAFT_BUSY
  if (raft.log.snapshot.last_index >= is.last_index) return;
  const raft_term local = logTermOf(&raft.log, is.last_index);
  if (local != 0 && local >= is.last_term) return;
  prefetch->start(install_plan(meta), member_at());
}

// Our state is older than a snapshot libraft installs: stream the state at
// its index from the member that took it, replacing ours.
Error Node::Impl::install(const consensus::SnapshotMeta& meta) {
  InstallPlan plan = install_plan(meta);
  auto member_of = member_at();
  if (!opts->install_plan_path.empty()) {
    if (Error e = write_plan(opts->install_plan_path, plan)) {
      // Without the plan a crash midway could not be recovered; and
      // libraft must not go on from this snapshot without its state.
      spdlog::critical("cannot record the snapshot install, stopping: {}", e.message());
      std::_Exit(70);
    }
  }
  spdlog::info("installing the snapshot at index {} (revision {}) taken by member {:x}", meta.applied_index(),
               meta.revision(), meta.source_member());
  raft_metrics().snapshot_installing.Set(1);
  struct InstallingReset {
    ~InstallingReset() { raft_metrics().snapshot_installing.Set(0); }
  } installing_reset;
  // Until some member can send the state: its peers may be restarting.
  // libraft must not go on from the snapshot's index without it (libraft
  // 0.15 does not undo a snapshot whose restore failed), so this thread
  // waits here; linearizable reads wait with it, serializable reads see
  // the old state. A failed attempt, even one that replaced part of the
  // state, is simply made again: restore starts from an empty state.
  auto backoff = kInstallRetryFirst;
  // Fetched already while libraft stored the snapshot (prefetch_state)?
  std::unique_ptr<Fsm::Staged> staged = prefetch->take(meta.applied_index());
  for (int attempt = 1;; ++attempt) {
    bool damaged = false;
    auto fetch_start = SteadyClock::now();
    Error e;
    if (staged) {
      e = sm->restore_staged(*staged, &damaged);
      staged.reset();
    } else {
      e = fetch_state(sm, *forwarder, plan, &damaged, member_of);
    }
    if (!e) {
      raft_metrics().snapshot_save_seconds.Observe(metrics::seconds_since(fetch_start));
      if (!opts->install_plan_path.empty()) remove_plan(opts->install_plan_path);
      return {};
    }
    if (attempt == 1 || attempt % 10 == 0) {
      spdlog::warn("no member could send the state at index {} yet (attempt {}): {}; trying again",
                   meta.applied_index(), attempt, e.message());
    }
    auto until = SteadyClock::now() + backoff;
    while (SteadyClock::now() < until) {
      if (stop_requested_now()) {
        // Stopping cannot wait for peers that may never come back; the
        // plan makes the next start fetch the state before libraft runs.
        spdlog::warn("stopped while installing the snapshot at index {}; the next start fetches the state first",
                     meta.applied_index());
        spdlog::default_logger()->flush();
        std::_Exit(0);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    backoff = std::min(backoff * 2, kInstallRetryMax);
    // Members may have been added or moved since: ask every one we know.
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      const auto& srv = raft.configuration.servers[i];
      if (srv.id == raft.id || srv.address == nullptr) continue;
      if (std::find(plan.targets.begin(), plan.targets.end(), srv.address) == plan.targets.end()) {
        plan.targets.push_back(srv.address);
      }
    }
  }
}

// Counts the commands of the entry just applied at `index`, and once those
// since the last snapshot reach --snapshot-count has libraft take one after
// this apply round (replication.c, shouldTakeSnapshot: applied entries past
// the last snapshot >= its threshold, which stays --snapshot-count entries
// as the bound on entries that carry no command).
void Node::Impl::note_applied_commands(raft_index index, uint32_t commands) {
  if (commands_recorded_from == 0 || (!entry_commands.empty() && index <= entry_commands.back().first)) {
    entry_commands.clear();  // a new start, or the log was replaced
    commands_recorded_from = index;
  }
  entry_commands.emplace_back(index, commands);
  // Bounded when snapshots keep failing (a full disk): entries dropped
  // here count one command each.
  const size_t cap = 2 * (size_t{opts->snapshot_threshold} + opts->snapshot_trailing) + 1024;
  while (entry_commands.size() > cap) {
    entry_commands.pop_front();
    commands_recorded_from = entry_commands.front().first;
  }
  commands_since_snapshot += commands;
  if (commands_since_snapshot >= opts->snapshot_threshold) raft_set_snapshot_threshold(&raft, 1);
}

// Entries behind a snapshot at `index` that hold --snapshot-catchup-entries
// commands (etcd keeps that many of its one-request entries behind a
// snapshot, server.go compactRaftLog). Entries not recorded count one each.
unsigned Node::Impl::catchup_entries(raft_index index) {
  const uint64_t want = opts->snapshot_trailing;
  uint64_t sum = 0;
  raft_index first = index + 1;  // the oldest entry kept
  for (auto it = entry_commands.rbegin(); it != entry_commands.rend() && sum < want; ++it) {
    if (it->first > index) continue;
    sum += it->second;
    first = it->first;
  }
  if (sum < want) {
    // Every recorded entry is counted: below them, one command an entry.
    raft_index recorded = commands_recorded_from == 0 ? index + 1 : std::min(commands_recorded_from, index + 1);
    first = recorded > want - sum ? recorded - (want - sum) : 1;
  }
  // Older entries are never counted again: later snapshots keep less.
  if (!entry_commands.empty() && entry_commands.front().first < first) {
    while (!entry_commands.empty() && entry_commands.front().first < first) entry_commands.pop_front();
    commands_recorded_from = first;
  }
  return static_cast<unsigned>(std::min<raft_index>(index + 1 - first, 1u << 30));
}

// Entries to keep behind a snapshot at `index`: those that hold
// --snapshot-catchup-entries commands (catchup_entries), or, on a leader, enough that each follower it sent a snapshot to goes on
// from the log after it: while the follower has not reported it installed
// (up to kSnapshotHoldMax), then what it has not got yet while it answers,
// up to kSnapshotHold after the send; as etcd skips compacting its log
// while a snapshot is in flight and 30 s after (server.go, compactRaftLog
// and sendMergedSnap). Without this a snapshot
// that took longer to install than the leader took to log the next
// --snapshot-count entries was followed by another, 19 in a row under heavy
// writes (issue #36).
unsigned Node::Impl::trailing_for(raft_index index) {
  raft_index keep_after = index;
  if (raft_state(&raft) == RAFT_LEADER) {
    const raft_time now = raft.io->time(raft.io);
    for (const SnapshotSent& s : snapshots_sent(&raft)) {
      int i = index_of(s.id);
      if (i < 0) continue;
      const struct raft_progress& p = raft.leader_state.progress[i];
      if (p.match_index < s.index) {
        // Not installed yet (a follower restoring answers nothing).
        if (now - s.at < kSnapshotHoldMax) keep_after = std::min(keep_after, s.index);
      } else if (now - s.at < kSnapshotHold &&
                 (p.recent_recv || contact.heard_within(s.id, SteadyClock::now(),
                                                        std::chrono::milliseconds(kInstalledSilenceElections *
                                                                                  opts->election_ms)))) {
        // Installed, and going on from the log: what it has not got yet,
        // while it was heard from within kInstalledSilenceElections election
        // timeouts; a follower stopped since is not waited for longer. One
        // election timeout was too short: a follower applying what followed
        // a large install (1 GB, 40 kB Txns, --snapshot-count 100) answered
        // nothing for longer, the log it was catching up on went, and it
        // installed again and again (attack4). recent_recv alone is
        // cleared every election timeout, and a follower busy writing the
        // entries after its install can take a while to answer: a snapshot
        // taken then dropped what it was catching up on, and it installed
        // a second one (test_catchup). Not libraft's pipeline state either:
        // sends to a killed follower do not fail here (the transport
        // reconnects), so it held the log for one for the whole
        // kSnapshotHold (test_snapshot_install under ASan).
        keep_after = std::min(keep_after, p.match_index);
      }
    }
  }
  // libraft keeps the `trailing` entries up to `index`: down to keep_after
  // itself, whose term the first append after the snapshot names.
  const unsigned catchup = catchup_entries(index);
  unsigned trailing = catchup;
  if (keep_after != index) {
    trailing = static_cast<unsigned>(
        std::min<raft_index>(std::max<raft_index>(catchup, index - keep_after + 1), 1u << 30));
  }
  // Never an entry at or below the log floor: a member that lacks it must
  // install the state (the restored members all have it already).
  if (log_floor > 0 && index >= log_floor) {
    trailing = static_cast<unsigned>(std::min<raft_index>(trailing, index - log_floor));
  }
  return trailing;
}

bool Node::Impl::log_holds_floor() {
  return log_floor > 0 && raft.log.offset < log_floor && raft_last_index(&raft) > raft.log.offset;
}

void Node::Impl::start_log_floor() {
  log_floor = sm->log_floor();
  if (!log_holds_floor()) return;
  // The first snapshot drops them (trailing_for); until then the leader
  // refuses to add members (add_member). The first entry applied, a
  // leader's term barrier at the latest, triggers it.
  spdlog::info("the Raft log holds entries up to index {} that did not build the restored state: a snapshot "
               "follows the next entry applied, and members can be added after it",
               log_floor);
  raft_set_snapshot_threshold(&raft, 1);
}

void Node::Impl::note_stall(SteadyClock::time_point now) {
  const auto election = std::chrono::milliseconds(opts->election_ms);
  // One window in ten election timeouts at most: a member whose thread
  // stalls again and again (an overloaded host, not a pause) would
  // otherwise never take a snapshot and its log would grow without bound
  // (a README walk saw 5x --snapshot-count behind a follower catching up).
  if (last_tick != SteadyClock::time_point{} && now - last_tick > election &&
      (deferral_started == SteadyClock::time_point{} || now - deferral_started > 10 * election)) {
    deferral_started = now;
    no_snapshot_until = now + election;
    snapshot_deferral_logged = false;
    spdlog::info("the consensus thread was stalled for {} ms (the process paused or starved): no snapshot of its own "
                 "for {} ms as a follower, the leader's may be on its way",
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - last_tick).count(), opts->election_ms);
  }
  last_tick = now;
}

int Node::Impl::fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n_bufs) {
  Impl* self = static_cast<Impl*>(fsm->data);
  // Seen here too: the appends queued during a stall may be applied before
  // the first tick after it.
  const auto now = SteadyClock::now();
  self->note_stall(now);
  if (raft_state(&self->raft) == RAFT_FOLLOWER && now < self->no_snapshot_until) {
    if (!self->snapshot_deferral_logged) {
      self->snapshot_deferral_logged = true;
      spdlog::info("snapshot at index {} deferred: this member resumed from a stall", raft_last_applied(&self->raft));
    }
    return RAFT_BUSY;  // libraft tries again at a later apply (replication.c, takeSnapshot)
  }
  // libraft reads the trailing count after this call, for this snapshot
  // (replication.c takeSnapshot: the log kept in memory and on disk).
  const raft_index snapshot_index = raft_last_applied(&self->raft);
  const unsigned trailing = self->trailing_for(snapshot_index);
  raft_set_snapshot_trailing(&self->raft, trailing);
  // libraft may drop log entries up to here once the snapshot is stored:
  // the state machine makes itself durable and keeps the state first.
  SnapshotPoint at;
  if (Error e = self->sm->take_snapshot(&at)) {
    spdlog::error("snapshot skipped: {}", e.message());
    return RAFT_IOERR;
  }
  // As etcd logs "triggering snapshot" and "compacted Raft logs": where a
  // follower that lags must be to go on from the log.
  spdlog::info("snapshot at index {} ({} commands since the last): the log keeps {} entries behind it", snapshot_index,
               self->commands_since_snapshot, trailing);
  // The next one after --snapshot-count more commands (note_applied_commands).
  self->commands_since_snapshot = 0;
  raft_set_snapshot_threshold(&self->raft, self->opts->snapshot_threshold);
  consensus::SnapshotMeta meta;
  meta.set_applied_index(at.applied_index);
  meta.set_revision(at.revision);
  meta.set_source_member(self->opts->id);
  std::string payload;
  append_framed(&payload, meta.SerializeAsString());
  pad_entry(&payload);
  auto* b = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
  if (b == nullptr) return RAFT_NOMEM;
  b->len = payload.size();
  b->base = raft_malloc(b->len);
  if (b->base == nullptr) {
    raft_free(b);
    return RAFT_NOMEM;
  }
  std::memcpy(b->base, payload.data(), b->len);
  *bufs = b;
  *n_bufs = 1;
  return 0;
}

int Node::Impl::fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf) {
  Impl* self = static_cast<Impl*>(fsm->data);
  std::string_view rest(static_cast<const char*>(buf->base), buf->len), bytes;
  bool corrupt = false;
  consensus::SnapshotMeta meta;
  if (!next_framed(&rest, &bytes, &corrupt) ||
      !meta.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    // libraft 0.15 stored the snapshot before this call and does not undo
    // it: going on would claim its index (a forged one wins elections and
    // spreads to every member). Stop this member only, as etcd's raft
    // panics on a snapshot it cannot read.
    spdlog::critical("cannot read a Raft snapshot's metadata ({} bytes), stopping", buf->len);
    std::_Exit(70);
  }
  if (meta.applied_index() > self->sm->applied_index()) {
    if (Error e = self->install(meta)) {
      spdlog::error("cannot install the snapshot at index {}: {}", meta.applied_index(), e.message());
      return RAFT_IOERR;
    }
  } else if (Error e = self->sm->make_durable()) {
    // Our state is at or past the snapshot, but applied entries may be in
    // memory only (storage::Durability::kReplayed) and libraft drops the
    // log up to the snapshot once this returns: nothing could replay them.
    spdlog::error("cannot keep the state at index {} durable: {}", self->sm->applied_index(), e.message());
    return RAFT_IOERR;
  }
  // libraft's log now starts after this snapshot: count from there.
  self->entry_commands.clear();
  self->commands_recorded_from = 0;
  self->commands_since_snapshot = 0;
  raft_set_snapshot_threshold(&self->raft, self->opts->snapshot_threshold);
  raft_free(buf->base);  // the fsm owns it once restore succeeds
  return 0;
}
}  // namespace etcdq::consensus
