// The libraft patches (consensus/libraft_patches.h): one section a patch, each
// saying what it replaces and why.
#include "consensus/libraft_patches.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <cerrno>
#include <map>
#include <mutex>
#include <utility>

// ==== 1. progressToProbe ======================================================
// Where a leader resumes replication to a follower after a snapshot: one
// index past the snapshot, as libraft intends, not at the snapshot.
//
// libraft 0.15 (Debian's libraft-dev 0.15.0, linked statically from its
// libraft.a) moves a follower it is sending a snapshot to back to probing
// when a send to it fails (replication.c, sendAppendEntriesCb) or once it
// reports the snapshot's index (the AppendEntries result). progressToProbe
// (progress.c) then sets next index = max(match + 1, snapshot index), while
// its comment says it probes from snapshot index + 1. A follower killed as
// its install started and restarted at once holds only that snapshot: it has
// no entry at the probe's previous index (snapshot index - 1) and rejects;
// its last index is above the rejected one, so the leader steps back one
// index a heartbeat until it runs off its own log and sends the snapshot
// again (--snapshot-count heartbeats: 2.5-3 s here, up to 2048 heartbeats).
// Upstream's HEAD still has it.
//
// The fix: the link (CMakeLists.txt, target etcdq_libraft) passes
// -Wl,--wrap=progressToProbe, so libraft's calls to progressToProbe from its
// other objects reach __wrap_progressToProbe below, which calls the original
// (__real_progressToProbe) and, when the follower left the snapshot state,
// raises its next index to snapshot index + 1. A follower that has the
// snapshot then accepts the first probe; one that lacks it rejects at the
// snapshot's index with its own last index, which the leader jumps back to
// (sending the snapshot again if its log no longer reaches there). The one call inside
// progress.c itself (progressMaybeDecrement, from pipeline state, where the
// original is right) is not redirected: the linker wraps only references
// between objects.
//
// Relies on libraft 0.15's layout: struct raft_progress (public, raft.h) and
// its states' values, 2 (PROGRESS__SNAPSHOT) and 1 (PROGRESS__PIPELINE,
// which progressToPipeline only sets), libraft's internal progress.h. CMakeLists.txt refuses any libraft other than 0.15.0.

namespace {
// libraft 0.15's progress states (src/progress.h).
constexpr unsigned short kProgressPipeline = 1;
constexpr unsigned short kProgressSnapshot = 2;
// Patch 8 (below): no answer is coming to the last send to follower i.
void note_send_settled(struct raft* r, unsigned i);
}  // namespace

extern "C" void __wrap_progressToProbe(struct raft* r, unsigned i) {
  struct raft_progress* p = &r->leader_state.progress[i];
  const bool was_snapshot = p->state == kProgressSnapshot;
  const raft_index snapshot_index = p->snapshot_index;  // the original clears it
  __real_progressToProbe(r, i);
  if (was_snapshot && p->next_index < snapshot_index + 1) {
    p->next_index = snapshot_index + 1;
  }
  if (was_snapshot && p->match_index >= snapshot_index) {
    // The follower reported the snapshot installed (replication.c,
    // replicationUpdate: progressSnapshotDone): its log is known to end at
    // or past the snapshot, which is what a successful probe would tell.
    // So it goes straight to pipeline, as etcd's raft does (raft.go,
    // stepLeader, MsgAppResp in StateSnapshot: BecomeProbe then
    // BecomeReplicate), and replicationUpdate sends it the entries past the
    // snapshot at once. In probe state libraft sent them only at the next
    // heartbeat tick (progressShouldReplicate): 0-100 ms of a paused
    // member's catch-up spent waiting (bench/RESULTS.md, "Sixth pass").
    p->state = kProgressPipeline;
  }
  // Called for a send that failed (replication.c, sendAppendEntriesCb) or a
  // snapshot the follower reported: no answer is coming to wait for (patch 8).
  note_send_settled(r, i);
}

// ==== 2. posix_fallocate ======================================================
// Log segments whose blocks are written before libraft appends to them, so
// that an append is an overwrite the kernel can do without blocking.
//
// libraft 0.15 (Debian's libraft-dev 0.15.0, linked statically from its
// libraft.a) creates each open segment (8 MiB) with posix_fallocate
// (uv_fs.c, UvFsAllocateFile, in its thread pool) and appends to it with
// O_DSYNC writes from libuv's thread pool (patch 3). ext4 leaves
// fallocated blocks unwritten: the first write into each 4 KiB block must
// convert its extent, a metadata change that the synced write then commits
// to the journal (a jbd2 commit, and its wake-ups, on top of the data's
// flush) for every append that reaches a new block (a quarter of them at
// 10 clients, nearly all at 1000). (Before patch 3, appends were
// direct AIO tried with RWF_NOWAIT, which the kernel refused over unwritten
// blocks: the first reason for this file.)
//
// The fix: the link (CMakeLists.txt, target etcdq_libraft) passes
// -Wl,--wrap=posix_fallocate, so libraft's call reaches
// __wrap_posix_fallocate below, which reserves the space as before
// (__real_posix_fallocate: ENOSPC is still reported at creation), writes
// zeros over it and drops those pages from the page cache (8 MiB of zeros
// a segment need not stay in memory; appends write whole 4 KiB blocks, so
// none is read back). The file reads the same (an
// unwritten extent reads as zeros) and libraft's own fallback when
// fallocate is unsupported also writes it; the segment is only written
// earlier, in libraft's pool, before any entry goes to it. Only references from the static libraft.a and our
// own objects are redirected (none of ours calls it); RocksDB and the other
// shared libraries keep glibc's.

namespace {
// The zeros written at a time: 8 synced writes (libraft opens the segment
// O_DSYNC, so each is a journal commit) for an 8 MiB segment, off the
// consensus thread. Never written to: in .bss, so reading it maps the zero
// page and costs no memory.
constexpr size_t kChunkBytes = 1 << 20;
alignas(4096) char kZeros[kChunkBytes];
}  // namespace

extern "C" int __wrap_posix_fallocate(int fd, off_t offset, off_t len) {
  if (int rv = __real_posix_fallocate(fd, offset, len); rv != 0) return rv;
  off_t at = offset;
  const off_t end = offset + len;
  while (at < end) {
    size_t n = static_cast<size_t>(end - at) < kChunkBytes ? static_cast<size_t>(end - at) : kChunkBytes;
    ssize_t w = ::pwrite(fd, kZeros, n, at);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    at += w;
  }
  // The zeros went through the page cache, where they need not stay:
  // appends write whole blocks, so none is read back. O_DSYNC left the
  // pages clean, so they can go. Advice only: a failure costs memory the
  // kernel reclaims anyway, not a wrong append.
  (void)::posix_fadvise(fd, offset, len, POSIX_FADV_DONTNEED);
  return 0;
}

// ==== 3. UvFsProbeCapabilities ================================================
// How libraft writes the Raft log: buffered writes to its O_DSYNC segment
// files, as etcd's WAL writes and fdatasyncs; not direct kernel AIO. An
// idle consensus thread writes a small append itself, otherwise a thread of
// libuv's pool does (below).
//
// libraft 0.15 (Debian's libraft-dev 0.15.0, linked statically from its
// libraft.a) probes the data dir at start (uv_fs.c, UvFsProbeCapabilities)
// and, where the file system offers them, appends with O_DIRECT kernel AIO
// submitted from the consensus thread (uv_writer.c). Segments are opened
// O_DSYNC, and for an asynchronous direct write the kernel does that sync
// after the data landed, on its per-CPU "dio" workqueue (iomap's deferred
// completion): a kernel worker bound to one core and scheduled like any
// task, woken for every append. On a host whose cores are busy with other
// work that wake-up waits for the core's next scheduler tick: with two busy
// processes on the two cores, 3 s of one-client puts spent 1.76 s waiting
// for that worker to run, and etcdq made 280-370 puts/s against etcd's
// 1,100 (bench/RESULTS.md, "Log writes on a busy host").
//
// The fix: the link (CMakeLists.txt, target etcdq_libraft) passes
// -Wl,--wrap=UvFsProbeCapabilities, so libraft's probe reaches
// __wrap_UvFsProbeCapabilities below, which runs the probe (its checks and
// errors stand) and then reports neither direct nor asynchronous I/O. libraft
// then submits each append from libuv's thread pool (uv_queue_work), where
// a buffered write to an O_DSYNC file is written and synced inside the
// submitting call, on that pool thread (a user thread any core can run):
// 1,117-1,199 puts/s in the same test, 2-2.4x at 10 clients. On a quiet
// host it costs a few percent at 10-1000 clients (the page cache copy and
// the pool's hand-off). Durability is unchanged: an append is reported only
// once the synced write returned.
//
// The probe itself still tries a direct and an asynchronous write, and
// refuses a file system that offers no direct I/O at all (ramfs), as
// before; tmpfs passes it.

extern "C" int __wrap_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg) {
  int rv = __real_UvFsProbeCapabilities(dir, direct, async, errmsg);
  if (rv != 0) return rv;
  *direct = 0;     // buffered writes, 4 KiB blocks (uv.c: block size 4096 without direct I/O)
  *async = false;  // submitted from libuv's thread pool, synced there
  return 0;
}

// ==== 4. UvWriterSubmit and 5. uv_queue_work ==================================
// Appends on an idle consensus thread. The pool's hand-off costs two
// cross-thread wake-ups an append (the pool thread's, then the loop's),
// which at one client was about a sixth of a put's time on this kind of VM.
// etcd's raft loop writes and fsyncs its WAL itself (raftNode's Ready
// handling, server/etcdserver/raft.go), so a slow disk holds up etcd's
// loop as it holds up this one. The link also wraps UvWriterSubmit (the
// append's write, uv_append.c) and uv_queue_work: while a thread has an
// InlineWrites registered and it takes the write (InlineWrites::take),
// libraft's work function runs right there, synchronously, and its
// completion is handed to InlineWrites::completed, which runs it on a
// later loop iteration, as libuv would have (libraft never sees a
// completion inside its own submit). Any other work, and every write the
// thread does not take, goes to libuv's pool as before.
//
// What changes: while such a write waits for the disk the loop does
// nothing else, as etcd's raftNode loop while it saves to its WAL (etcd's
// raft state machine ticks on in another goroutine; ours is this loop):
// a linearizable read or a status waits for it too. consensus::Node takes writes
// only on a member that is its own quorum (a single member), where the
// read could not be served from a stalled log anyway; in a cluster every
// write goes to the pool, as before, so a stalled disk never stops a
// member's ticks, heartbeats or votes.
namespace etcdq::consensus {
namespace {
thread_local InlineWrites* t_inline = nullptr;
// Inside __wrap_UvWriterSubmit: the bytes of the append being submitted.
thread_local bool t_submitting = false;
thread_local size_t t_submit_bytes = 0;
}  // namespace

void set_inline_writes(InlineWrites* w) { t_inline = w; }
}  // namespace etcdq::consensus

extern "C" int __wrap_UvWriterSubmit(struct UvWriter* w, struct UvWriterReq* req, const uv_buf_t bufs[], unsigned n,
                                     size_t offset, UvWriterReqCb cb) {
  using namespace etcdq::consensus;
  size_t bytes = 0;
  for (unsigned i = 0; i < n; ++i) bytes += bufs[i].len;
  t_submitting = true;
  t_submit_bytes = bytes;
  int rv = __real_UvWriterSubmit(w, req, bufs, n, offset, cb);
  t_submitting = false;
  return rv;
}

extern "C" int __wrap_uv_queue_work(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after) {
  using namespace etcdq::consensus;
  if (!t_submitting || t_inline == nullptr || !t_inline->take(t_submit_bytes)) {
    return __real_uv_queue_work(loop, req, work, after);
  }
  t_submitting = false;
  req->loop = loop;  // as uv_queue_work sets it; libraft reads only `data`
  work(req);         // the write and its sync (uvWriterWorkCb)
  t_inline->completed(req, after);
  return 0;
}

// ==== 6. progressToSnapshot and 7. progressMaybeDecrement =====================
// A leader resends a snapshot its follower dropped at once, not after
// libraft's install-snapshot timeout; and walks back over a follower's
// divergent entries a term at a time, not an index a heartbeat.
//
// libraft 0.15 (Debian's libraft-dev 0.15.0, linked statically from its
// libraft.a) drops an InstallSnapshot without an answer when the follower is
// taking a snapshot of its own (replication.c, replicationInstallSnapshot:
// RAFT_BUSY, "the leader will eventually retry"). The leader, in snapshot
// state for that follower, keeps sending it heartbeats, whose rejections it
// ignores (progress.c, progressMaybeDecrement), until the install-snapshot
// timeout (max(5 s, 5 elections) here, consensus/node.cc): a paused leader
// that came back served only 5.3-5.8 s later (issue #36). And a follower
// whose log holds entries of an older term past the leader's (a leader that
// was paused or cut off with appends in flight) is probed one index back a
// heartbeat: progressMaybeDecrement sets next index = rejected index, and
// a probing leader sends one message a heartbeat.
//
// The fix: the link (CMakeLists.txt, target etcdq_libraft) passes
// -Wl,--wrap for both, so replication.c's calls reach the wrappers below.
// __wrap_progressToSnapshot records, for each follower a snapshot goes to,
// the snapshot's index, the leader's last index and the time.
// __wrap_progressMaybeDecrement, for a follower in snapshot state, treats a
// rejected heartbeat that was sent after the snapshot (its previous index is
// past the leader's last index at the send; or, when the leader's log has not
// moved, an election timeout passed) from a follower whose log ends before
// the snapshot as the snapshot dropped: the follower goes back to probing and
// libraft sends the snapshot again at once. A follower storing it answers
// with last index 0 (libraft's last_stored while it stores one), and one
// busy restoring answers nothing, so neither is sent a second one (a last
// index 0 that lasts an election timeout is taken as dropped). In probe state, after the original, when the follower's log
// reaches the rejected index (a term conflict, not a short log) the next index
// goes back to the first entry of the leader's run of the rejected entry's
// term (never below match index + 1): the next probe's previous entry is of
// an older term, one round trip a term. Entries the follower had already are
// sent again and skipped by it, as Raft allows.
//
// Relies on libraft 0.15's layout: struct raft_progress and struct raft (public,
// raft.h), the progress states' values (progress.h), and logTermOf
// (log.c, not static).

namespace {
constexpr unsigned short kProgressProbe = 0;

struct SentRecord {
  raft_index index = 0;       // the snapshot's
  raft_index last_index = 0;  // the leader's last index when it was sent
  raft_time at = 0;           // the leader's clock (ms) then
  // When the InstallSnapshot message went to the transport: libraft loads
  // the snapshot (an asynchronous read) between progressToSnapshot and the
  // send, and appends sent meanwhile reach the follower before it.
  bool on_wire = false;
  raft_index wire_last_index = 0;  // the leader's last index then
  raft_time wire_at = 0;           // and its clock
};
std::mutex sent_mu;
std::map<std::pair<const struct raft*, raft_id>, SentRecord> sent_records;

// The first index in [lo, hi] whose term is at least t: terms never
// decrease along a log, and logTermOf is 0 before the log's first entry.
raft_index first_of_term_run(struct raft* r, raft_index lo, raft_index hi, raft_term t) {
  while (lo < hi) {
    raft_index mid = lo + (hi - lo) / 2;
    if (logTermOf(&r->log, mid) >= t) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}
}  // namespace

namespace etcdq::consensus {

std::vector<SnapshotSent> snapshots_sent(const struct raft* r) {
  std::vector<SnapshotSent> out;
  std::lock_guard<std::mutex> lock(sent_mu);
  for (auto it = sent_records.lower_bound({r, 0}); it != sent_records.end() && it->first.first == r; ++it) {
    out.push_back(SnapshotSent{it->first.second, it->second.index, it->second.at});
  }
  return out;
}

void snapshot_on_wire(const struct raft_io* io, raft_id id) {
  std::lock_guard<std::mutex> lock(sent_mu);
  for (auto& [key, rec] : sent_records) {
    if (key.second != id || key.first->io != io) continue;
    auto* r = const_cast<struct raft*>(key.first);
    rec.on_wire = true;
    rec.wire_last_index = raft_last_index(r);
    rec.wire_at = r->io->time(r->io);
  }
}

void forget_snapshots_sent(const struct raft* r) {
  std::lock_guard<std::mutex> lock(sent_mu);
  auto it = sent_records.lower_bound({r, 0});
  while (it != sent_records.end() && it->first.first == r) it = sent_records.erase(it);
}

}  // namespace etcdq::consensus

// The fields keep_log_for_sent_snapshot relies on, where libraft 0.15's
// takeSnapshotCb (replication.c, in libraft.a) reads them once the snapshot
// is stored: logSnapshot(&r->log, r->snapshot.pending.index,
// r->snapshot.trailing) at offsets 0x130 and 0x12c of struct raft.
static_assert(offsetof(struct raft, snapshot.trailing) == 0x12c, "libraft 0.15's struct raft");
static_assert(offsetof(struct raft, snapshot.pending.index) == 0x130, "libraft 0.15's struct raft");

namespace {
// A snapshot being stored while an older one goes to a follower: libraft
// sends its last stored snapshot, and drops the log behind the one being
// stored only once that is stored, with the trailing count set when it was
// taken (consensus/snapshots.cc trailing_for, which could not count this
// send). Without more, the entry at the sent snapshot's index went, the
// follower's first append after its install could not name its term, and
// it was sent the newer snapshot right after installing the first
// (test_catchup: "2 snapshot install(s)", the leader's log showing the
// snapshot at 1798 taken 53 ms before the one at 1707 was sent). So the
// trailing count of the one being stored grows to keep the sent
// snapshot's index and what follows; libraft reads it when the store
// completes (static_asserts above).
void keep_log_for_sent_snapshot(struct raft* r, raft_index sent_index) {
  if (r->snapshot.pending.term == 0 || r->snapshot.pending.index <= sent_index) return;
  const raft_index need = r->snapshot.pending.index - sent_index + 1;
  if (need > r->snapshot.trailing && need < (raft_index{1} << 30)) {
    r->snapshot.trailing = static_cast<unsigned>(need);
  }
}
}  // namespace

extern "C" void __wrap_progressToSnapshot(struct raft* r, unsigned i) {
  __real_progressToSnapshot(r, i);
  const struct raft_progress& p = r->leader_state.progress[i];
  keep_log_for_sent_snapshot(r, p.snapshot_index);
  SentRecord rec{p.snapshot_index, raft_last_index(r), r->io->time(r->io)};
  const raft_id id = r->configuration.servers[i].id;
  SentRecord before;
  {
    std::lock_guard<std::mutex> lock(sent_mu);
    auto it = sent_records.find({r, id});
    if (it != sent_records.end()) before = it->second;
    sent_records[{r, id}] = rec;
  }
  // Rare (a follower too far behind), and what a catch-up's timeline needs
  // from the leader's side: when each snapshot went, and whether it
  // followed another not installed yet.
  if (before.index != 0 && p.match_index < before.index) {
    spdlog::info("sending the snapshot at index {} to member {:x} (match index {}); the one at index {} sent {} ms "
                 "ago is not installed",
                 rec.index, id, p.match_index, before.index, rec.at - before.at);
  } else {
    spdlog::info("sending the snapshot at index {} to member {:x} (match index {})", rec.index, id, p.match_index);
  }
}

extern "C" bool __wrap_progressMaybeDecrement(struct raft* r, unsigned i, raft_index rejected,
                                              raft_index last_index) {
  struct raft_progress* p = &r->leader_state.progress[i];
  if (p->state == kProgressSnapshot) {
    if (rejected != p->snapshot_index && last_index < p->snapshot_index) {
      SentRecord rec;
      {
        std::lock_guard<std::mutex> lock(sent_mu);
        auto it = sent_records.find({r, r->configuration.servers[i].id});
        if (it != sent_records.end()) rec = it->second;
      }
      // Only answers to what was sent after the InstallSnapshot message
      // count: before it went to the transport (libraft reads the snapshot
      // first), appends sent meanwhile were answered with the old log, and
      // a snapshot sent again because of them was installed right after
      // the first (issue #36: "2 snapshots installed", the leader's log
      // showed the answer 6 ms after progressToSnapshot). A snapshot that
      // never went out is left to libraft's install-snapshot timeout.
      const raft_time now = r->io->time(r->io);
      const bool waited = rec.on_wire && now - rec.wire_at >= r->election_timeout;
      // A follower storing the snapshot answers heartbeats with last index 0
      // (replication.c, replicationInstallSnapshot sets last_stored = 0
      // until it is stored): not dropped, unless that lasts an election
      // timeout (a new member restarted with no log lost it). Taken as
      // dropped, the leader sent its next snapshot, which the follower
      // installed right after the first (issue #36: "2 snapshots installed").
      const bool storing = last_index == 0 && !waited;
      const bool after_send = rec.index == p->snapshot_index && rec.on_wire && !storing &&
                              (rejected > rec.wire_last_index || waited);
      if (after_send) {
        spdlog::info("member {:x} answered without the snapshot at index {} ({} ms after it was sent; rejected index "
                     "{}, its last index {}): sending it again",
                     r->configuration.servers[i].id, p->snapshot_index, now - rec.wire_at, rejected, last_index);
        progressAbortSnapshot(r, i);
        return true;  // replication.c sends the snapshot again now
      }
    }
    return __real_progressMaybeDecrement(r, i, rejected, last_index);
  }
  const bool retry = __real_progressMaybeDecrement(r, i, rejected, last_index);
  if (retry && p->state == kProgressProbe && p->next_index == rejected && rejected > p->match_index + 1) {
    const raft_term t = logTermOf(&r->log, rejected);
    if (t != 0) p->next_index = first_of_term_run(r, p->match_index + 1, rejected, t);
  }
  return retry;
}

// ==== 8. progressShouldReplicate and progressMarkRecentRecv ===================
// A leader probing a follower waits for its answer to the last append
// (up to half an election timeout) before it sends the entries again.
//
// libraft 0.15 (Debian's libraft-dev 0.15.0, linked statically from its
// libraft.a), for a follower in probe state, sends every entry from the
// follower's next index to its last at each heartbeat
// (progress.c, progressShouldReplicate; replication.c, replicationProgress),
// whether or not the follower answered the previous one. A follower that
// is behind by megabytes (restarted under writes) or does not read (paused)
// is sent all of them again every heartbeat: a member restarted under full
// speed writes read 300 MB of copies in 1.5 s before it answered the first,
// on the thread that applies, and served 5-8 s after its start against etcd's
// 1.3-2.9 s (issue #36). etcd's raft sends one append to a probed follower
// and waits for its answer (or a heartbeat's) before the next (Progress
// MsgAppFlowPaused); its heartbeats are separate messages.
//
// The fix: the link (CMakeLists.txt, target etcdq_libraft) passes
// -Wl,--wrap for both, so replication.c's calls reach the wrappers below.
// __wrap_progressMarkRecentRecv records when each follower last answered an
// append (and patch 1's wrapper when a send to it failed: a member that is
// down is probed each heartbeat as before, so one that restarts is found at
// once). __wrap_progressShouldReplicate says "not yet" for a follower in
// probe state that has not answered since the last send, until half an
// election timeout after it: libraft's message is both the entries and the
// heartbeat, so the follower still hears from the leader well within its
// election timeout. A follower that answers is probed as before.
//
// Relies on libraft 0.15's layout: struct raft_progress (its last_send) and
// the probe state's value, 0 (progress.h).

namespace {
std::mutex answered_mu;
std::map<std::pair<const struct raft*, raft_id>, raft_time> answered_at;

void note_send_settled(struct raft* r, unsigned i) {
  if (i >= r->configuration.n) return;
  std::lock_guard<std::mutex> lock(answered_mu);
  raft_time& at = answered_at[{r, r->configuration.servers[i].id}];
  at = std::max(at, r->leader_state.progress[i].last_send);
}
}  // namespace

extern "C" void __wrap_progressMarkRecentRecv(struct raft* r, const unsigned i) {
  __real_progressMarkRecentRecv(r, i);
  std::lock_guard<std::mutex> lock(answered_mu);
  answered_at[{r, r->configuration.servers[i].id}] = r->io->time(r->io);
}

extern "C" bool __wrap_progressShouldReplicate(struct raft* r, unsigned i) {
  const struct raft_progress* p = &r->leader_state.progress[i];
  if (p->state == kProgressProbe && p->last_send != 0) {
    const raft_time now = r->io->time(r->io);
    if (now - p->last_send < r->election_timeout / 2) {
      raft_time answered = 0;
      {
        std::lock_guard<std::mutex> lock(answered_mu);
        auto it = answered_at.find({r, r->configuration.servers[i].id});
        if (it != answered_at.end()) answered = it->second;
      }
      if (answered < p->last_send) return false;
    }
  }
  return __real_progressShouldReplicate(r, i);
}

namespace etcdq::consensus {
void forget_answers(const struct raft* r) {
  std::lock_guard<std::mutex> lock(answered_mu);
  auto it = answered_at.lower_bound({r, 0});
  while (it != answered_at.end() && it->first.first == r) it = answered_at.erase(it);
}
}  // namespace etcdq::consensus

// ==== 9. send_commit_now ======================================================
// A leader tells its followers a new commit index at once.
//
// libraft 0.15 sends the commit index only inside AppendEntries: with the
// next entries, or in a heartbeat, which its tick sends to a follower only
// when nothing was sent to it for a whole heartbeat interval
// (progressShouldReplicate), so an idle follower hears of a commit 100 to
// 200 ms late, and a busy one once the next entry's append message comes,
// which it handles only after writing that entry to its own log. Followers
// apply (and answer what was forwarded through them, and tell their
// watchers) only then. etcd's leader sends every commit at once (raft.go,
// bcastAppend after maybeCommit). Measured (bench/queue_cycle.py, 1,000
// queue messages/s through a follower of 3): produce-to-delivery p50 7.2 to
// 7.6 ms without, 3.6 to 5.3 ms with; p99 46 to 76 ms without, 15 to 32 ms
// with (bench/RESULTS.md, "Queue latency"). A follower that gets the
// heartbeat while it still writes the entry needs patch 10 to use it.
//
// send_commit_now marks each follower in pipeline state as not sent to for
// an interval (raft_progress.last_send, public in raft.h) and calls
// replicationHeartbeat, libraft's own heartbeat, which then sends each an
// AppendEntries: empty for one that has every entry, the missing ones
// otherwise, each with the commit index. Probe and snapshot states keep
// libraft's pacing. Relies on 0.15's progress-state values and on
// replicationHeartbeat being global in libraft.a (libraft.patches_fit
// checks that).
namespace etcdq::consensus {
void send_commit_now(struct raft* r) {
  for (unsigned i = 0; i < r->configuration.n; ++i) {
    if (r->configuration.servers[i].id == r->id) continue;
    struct raft_progress* p = &r->leader_state.progress[i];
    if (p->state == kProgressPipeline) p->last_send = 0;
  }
  (void)replicationHeartbeat(r);
}
}  // namespace etcdq::consensus

// ==== 10. HeardCommit =========================================================
// A follower applies a commit it heard while the entries were being written.
//
// libraft 0.15's follower sets its commit index to min(leader commit, last
// stored) when an AppendEntries arrives (replication.c, replicationAppend
// for an empty one) and, for one with entries, once their write completes,
// from that same message's leader commit (appendFollowerCb). A leader that
// commits an entry on its own write and one follower's sends the commit
// (patch 9's heartbeat) while the other follower is still writing that
// entry: the heartbeat's commit is cut to the entries stored before it, and
// the write's completion brings only the older commit its own message
// carried. That follower applies the entry only at the next append or
// heartbeat, 100 to 200 ms later when idle: the stalls patch 9's first
// version saw through one follower in some runs, and why forwarded writes
// took a barrier entry instead (one more log write on every member).
// etcd's raft keeps a commit index above what is stable (raft.go,
// handleHeartbeat's commitTo) and applies once the entries are stored.
//
// HeardCommit does the same: from each AppendEntries it keeps the leader's
// commit, capped at the last index the message says both logs share, once
// this follower's log holds that index with the leader's term for it (Raft's
// log matching: every entry up to it is then the leader's). After each
// stored append libraft hears of, and each message, it raises libraft's
// commit index to what was heard, up to what is stored, and lets libraft's
// replicationApply apply it, as appendFollowerCb would have. Kept per term:
// a new term's leader vouches again. Relies on 0.15's struct raft fields
// (public, raft.h) and on logTermOf, replicationApply and
// replicationInstallSnapshotBusy being global in libraft.a
// (libraft.patches_fit checks that). tests/unit/consensus_heard_commit_test.cc
// plays the race on libraft's in-memory cluster, with and without this.
namespace etcdq::consensus {
HeardCommit::Vouch HeardCommit::vouch_of(const struct raft_message& m) {
  Vouch v;
  if (m.type != RAFT_IO_APPEND_ENTRIES) return v;
  const struct raft_append_entries& a = m.append_entries;
  // A peer's numbers are checked: an index past raft_index's range names
  // no entry.
  if (a.n_entries > 0 && a.prev_log_index > std::numeric_limits<raft_index>::max() - a.n_entries) return v;
  v.term = a.term;
  v.match_index = a.prev_log_index + a.n_entries;
  v.match_term = a.n_entries > 0 ? a.entries[a.n_entries - 1].term : a.prev_log_term;
  v.commit = std::min(a.leader_commit, v.match_index);
  return v;
}

void HeardCommit::heard(struct raft* r, const Vouch& v) {
  if (v.term == 0 || v.commit == 0 || r->state != RAFT_FOLLOWER || v.term != r->current_term) return;
  // logTermOf gives 0 for an index this log does not hold; every entry's
  // term is at least 1, so a vouch naming term 0 (a heartbeat past the end
  // of this log, or a forged one) vouches for nothing here.
  if (v.match_term == 0 || logTermOf(&r->log, v.match_index) != v.match_term) return;
  if (term_ != v.term) {
    term_ = v.term;
    index_ = 0;
  }
  index_ = std::max(index_, v.commit);
}

void HeardCommit::apply(struct raft* r) const {
  if (r->state != RAFT_FOLLOWER || term_ != r->current_term || replicationInstallSnapshotBusy(r)) return;
  raft_index to = std::min(index_, r->last_stored);
  if (to <= r->commit_index) return;
  r->commit_index = to;
  (void)replicationApply(r);
}
}  // namespace etcdq::consensus
