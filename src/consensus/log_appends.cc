// How the Raft log's appends reach libraft (consensus/log_appends.h).
// On the consensus thread (consensus/node_impl.h).
#include "consensus/log_appends.h"

#include <cassert>
#include <cstdlib>

#include "consensus/metrics.h"
#include "consensus/node_impl.h"

namespace etcdq::consensus {

namespace {
// The role whose loop runs on this thread (one loop a thread): an append's
// callback gets only the request.
thread_local LogAppends* t_appending = nullptr;
}  // namespace

void LogAppends::install(struct raft_io* io) {
  uv_append_ = io->append;
  io->append = append_hook;
  uv_snapshot_put_ = io->snapshot_put;
  io->snapshot_put = snapshot_put_hook;
}

int LogAppends::snapshot_put_hook(struct raft_io* io, unsigned trailing, struct raft_io_snapshot_put* req,
                                  const struct raft_snapshot* snapshot, raft_io_snapshot_put_cb cb) {
  LogAppends* self = &Node::Impl::of(io)->log_appends;
  t_appending = self;
  self->snapshot_puts_[req] = {cb, snapshot->index};
  int rv = self->uv_snapshot_put_(io, trailing, req, snapshot, snapshot_stored_hook);
  if (rv != 0) self->snapshot_puts_.erase(req);
  return rv;
}

void LogAppends::snapshot_stored_hook(struct raft_io_snapshot_put* req, int status) {
  LogAppends* self = t_appending;
  auto it = self->snapshot_puts_.find(req);
  SnapshotPut p = it->second;
  self->snapshot_puts_.erase(it);
  if (status != 0 && status != RAFT_CANCELED) {
    // raft_uv removed what it wrote of it; the log stays as it was. (Its
    // message stays inside raft_uv's request: only the code comes here.)
    spdlog::error("Raft snapshot at index {} not stored, the log is kept whole: {}", p.index,
                  status == RAFT_NOSPACE ? "no space left on device" : raft_strerror(status));
  }
  p.cb(req, status);
}

void LogAppends::open(uv_loop_t* loop) {
  uv_check_init(loop, &after_io_);
  after_io_.data = this;
  uv_idle_init(loop, &no_block_);
  no_block_.data = this;
  uv_idle_init(loop, &inline_idle_);
  inline_idle_.data = this;
  defer_ = true;
}

void LogAppends::stop_deferring() {
  report_written();
  defer_ = false;
}

void LogAppends::close_handles() {
  uv_close(reinterpret_cast<uv_handle_t*>(&after_io_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&no_block_), nullptr);
  // Nothing is left to complete: libraft closes a segment only with no
  // write in flight, and its I/O only once no segment is open.
  assert(inline_done_.empty());
  uv_close(reinterpret_cast<uv_handle_t*>(&inline_idle_), nullptr);
}

int LogAppends::append_hook(struct raft_io* io, struct raft_io_append* req, const struct raft_entry entries[],
                            unsigned n, raft_io_append_cb cb) {
  LogAppends* self = &Node::Impl::of(io)->log_appends;
  t_appending = self;
  // raft_uv's batch on disk (uv_encoding.c): two checksums, the entry
  // count, a 16-byte header an entry, each entry's data padded to 8 bytes.
  uint64_t bytes = 8 + 8 + 16 * static_cast<uint64_t>(n);
  for (unsigned i = 0; i < n; ++i) bytes += (entries[i].buf.len + 7) / 8 * 8;
  self->appends_[req] = {cb, SteadyClock::now(), bytes};
  int rv = self->uv_append_(io, req, entries, n, appended_hook);
  if (rv != 0) self->appends_.erase(req);
  return rv;
}

void LogAppends::appended_hook(struct raft_io_append* req, int status) {
  LogAppends* self = t_appending;
  auto it = self->appends_.find(req);
  TimedAppend t = it->second;
  self->appends_.erase(it);
  if (status != 0 && status != RAFT_CANCELED) {
    // The Raft log could not be written (a full disk, an I/O error).
    // libraft 0.15 goes on after a failed append (appendLeaderCb and
    // appendFollowerCb only fail that request; raft_uv marks itself
    // errored but never reads the mark), and a later append that succeeds
    // would report entries above the hole as stored. Stop, as etcd does
    // when its WAL cannot be saved ("failed to save Raft hard state and
    // entries", etcdserver/raft.go, lg.Fatal): everything acknowledged is
    // in the log up to the last append that succeeded, and a restart
    // once there is space again loads it.
    // (libraft 0.15's raft_strerror has no text for RAFT_NOSPACE.)
    spdlog::critical("cannot write the Raft log ({}: {}), stopping",
                     status == RAFT_NOSPACE ? "no space left on device" : raft_strerror(status),
                     self->n_.raft.io->errmsg);
    spdlog::default_logger()->flush();
    std::_Exit(70);
  }
  if (status == 0) {
    raft_metrics().wal_fsync_seconds.Observe(
        std::chrono::duration<double>(SteadyClock::now() - t.start).count());
    raft_metrics().wal_write_bytes.Increment(static_cast<double>(t.bytes));
  }
  if (status == 0 && self->defer_) {
    // After raft_uv has started the next write (consensus/log_appends.h).
    self->written_.push_back({req, t.cb});
    uv_check_start(&self->after_io_, [](uv_check_t* h) { static_cast<LogAppends*>(h->data)->report_written(); });
    uv_idle_start(&self->no_block_, [](uv_idle_t* h) { static_cast<LogAppends*>(h->data)->report_written(); });
    return;
  }
  self->report_written();  // libraft hears of appends in the order they were made
  t.cb(req, status);
  self->n_.heard_commit.apply(&self->n_.raft);
}

void LogAppends::report_written() {
  // A callback may apply entries whose answers make more appends complete:
  // they join the end of the queue and are reported in this same pass.
  while (!written_.empty()) {
    WrittenAppend w = written_.front();
    written_.pop_front();
    w.cb(w.req, 0);
    // A follower may have heard of the commit of what it just stored
    // before it was stored (libraft_patches.h, 10).
    n_.heard_commit.apply(&n_.raft);
  }
  if (defer_) {
    uv_check_stop(&after_io_);
    uv_idle_stop(&no_block_);
  }
}

bool LogAppends::take(size_t bytes) {
  // After close_raft() began (deferring stopped) nothing is taken, so
  // no completion is queued once inline_idle_ may be closing.
  if (!defer_ || !written_.empty() || bytes > kInlineWriteBytes) return false;
  // Only a member that is its own quorum. A leader with followers submits
  // its own append before it sends the entries to them (libraft's
  // replicationTrigger: appendLeader, then triggerAll), so its followers'
  // writes would wait for its fsync instead of running beside it; and a
  // loop that waits for the disk neither ticks nor reads: a follower or
  // leader whose disk stalls past the election timeout would come back to
  // a lapsed election timer or a lapsed quorum check and disturb a cluster
  // that the pool's writes leave alone.
  if (raft_state(&n_.raft) != RAFT_LEADER) return false;
  const struct raft_configuration& c = n_.raft.configuration;
  for (unsigned i = 0; i < c.n; ++i) {
    if (c.servers[i].role == RAFT_VOTER && c.servers[i].id != n_.raft.id) return false;
  }
  return true;
}

void LogAppends::completed(uv_work_t* work, uv_after_work_cb after) {
  inline_done_.emplace_back(work, after);
  uv_idle_start(&inline_idle_, [](uv_idle_t* h) { static_cast<LogAppends*>(h->data)->run_inline_done(); });
}

void LogAppends::run_inline_done() {
  uv_idle_stop(&inline_idle_);
  // Those queued now; a write a callback submits, if taken, completes on a
  // later iteration (completed() starts the handle again).
  std::deque<std::pair<uv_work_t*, uv_after_work_cb>> due;
  due.swap(inline_done_);
  for (auto [work, after] : due) after(work, 0);  // libraft's uvWriterAfterWorkCb: the append's callbacks
}
}  // namespace etcdq::consensus
