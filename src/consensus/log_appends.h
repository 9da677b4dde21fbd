// Internal to consensus/: how the Raft log's appends reach libraft, one role of
// consensus::Node. It sits between libraft and its I/O's append (raft_io's
// `append`, replaced in start()) and owns what that needs:
//
// - Timing: each append is timed for etcd_disk_wal_fsync_duration_seconds
//   (consensus/metrics.h); libraft owns each request's data field, so the
//   original callback and the start time are kept here, by request.
// - Deferred reports: raft_uv calls a write's callbacks before it starts
//   the write of the entries that queued behind it (uvAliveSegmentWriteCb,
//   uv_append.c), and libraft applies what commits inside those callbacks
//   (appendLeaderCb): reported as they come, every fsync would wait for the
//   apply of the entries before it. Reported in the check phase of the same
//   loop iteration instead, once raft_uv has started the next write, that
//   fsync runs while they apply. To libraft this is a disk that answers a
//   few microseconds later; order is kept (a failed append reports the ones
//   before it first), and stop_deferring() reports what is left before
//   libraft closes.
// - Inline writes (consensus/libraft_patches.h, patches 4-5): an append is
//   written on the loop's own thread only on a member that is its own
//   quorum, while nothing waits to be reported (no apply is due that the
//   write would hold up) and small (an idle member's proposal, not a batch
//   under load), so under load the pool keeps overlapping each fsync with
//   the apply of the entries before it. Completions run in an idle handle's
//   callback, on a later loop iteration.
// - Failures: an append that fails stops the member (log_appends.cc says
//   why); a snapshot that could not be stored (a full disk) is logged, and
//   libraft goes on as before: it keeps its log and tries at the next
//   threshold (libraft 0.15 itself only traces it).
//
// Threads: the consensus thread only.
#pragma once

extern "C" {
#include <raft.h>
}
#include <uv.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <unordered_map>
#include <utility>

#include "consensus/libraft_patches.h"
#include "consensus/node.h"

namespace etcdq::consensus {

class LogAppends final : public InlineWrites {
 public:
  explicit LogAppends(Node::Impl& node) : n_(node) {}

  // Puts this role between libraft and `io`'s append (before raft_start).
  void install(struct raft_io* io);
  // Opens its loop handles and starts deferring reports (start(), before
  // the loop runs).
  void open(uv_loop_t* loop);
  // Reports every written append and stops deferring (close_raft(), before
  // raft_close).
  void stop_deferring();
  // Closes its loop handles (in raft_close's callback: no write is left).
  void close_handles();

  // InlineWrites (registered for the loop's thread by Node::start).
  bool take(size_t bytes) override;
  void completed(uv_work_t* work, uv_after_work_cb after) override;

  static constexpr size_t kInlineWriteBytes = 64 << 10;

 private:
  static int append_hook(struct raft_io* io, struct raft_io_append* req, const struct raft_entry entries[],
                         unsigned n, raft_io_append_cb cb);
  static void appended_hook(struct raft_io_append* req, int status);
  static int snapshot_put_hook(struct raft_io* io, unsigned trailing, struct raft_io_snapshot_put* req,
                               const struct raft_snapshot* snapshot, raft_io_snapshot_put_cb cb);
  static void snapshot_stored_hook(struct raft_io_snapshot_put* req, int status);
  void report_written();
  void run_inline_done();

  struct TimedAppend {
    raft_io_append_cb cb;
    std::chrono::steady_clock::time_point start;
    uint64_t bytes = 0;  // the batch as raft_uv encodes it (etcd_disk_wal_write_bytes_total)
  };
  struct WrittenAppend {
    struct raft_io_append* req;
    raft_io_append_cb cb;
  };

  Node::Impl& n_;
  int (*uv_append_)(struct raft_io*, struct raft_io_append*, const struct raft_entry[], unsigned,
                    raft_io_append_cb) = nullptr;
  std::unordered_map<struct raft_io_append*, TimedAppend> appends_;  // in flight
  int (*uv_snapshot_put_)(struct raft_io*, unsigned, struct raft_io_snapshot_put*, const struct raft_snapshot*,
                          raft_io_snapshot_put_cb) = nullptr;
  struct SnapshotPut {
    raft_io_snapshot_put_cb cb;
    raft_index index;
  };
  std::unordered_map<struct raft_io_snapshot_put*, SnapshotPut> snapshot_puts_;  // in flight
  std::deque<WrittenAppend> written_;  // written, not yet reported to libraft
  uv_check_t after_io_{};              // reports `written_` after the poll phase
  uv_idle_t no_block_{};               // keeps the loop from blocking while `written_` waits
  bool defer_ = false;                 // between open() and stop_deferring()
  std::deque<std::pair<uv_work_t*, uv_after_work_cb>> inline_done_;
  uv_idle_t inline_idle_{};
};

}  // namespace etcdq::consensus
