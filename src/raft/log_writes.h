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
// work that wake-up waits for the core's next scheduler tick, so
// one-client puts spent much of their time waiting for that worker to run
// and etcdq fell far behind etcd (bench/RESULTS.md, "Log writes on a busy
// host").
//
// The fix: the link (CMakeLists.txt, target etcdq_libraft) passes
// -Wl,--wrap=UvFsProbeCapabilities, so libraft's probe reaches
// __wrap_UvFsProbeCapabilities below, which runs the probe (its checks and
// errors stand) and then reports neither direct nor asynchronous I/O. libraft
// then submits each append from libuv's thread pool (uv_queue_work), where
// a buffered write to an O_DSYNC file is written and synced inside the
// submitting call, on that pool thread (a user thread any core can run),
// which put etcdq level with etcd in the same test. On a quiet host it
// costs a little (the page cache copy and the pool's hand-off; the numbers:
// bench/RESULTS.md, "Measurements moved from headers"). Durability is unchanged: an append is reported only
// once the synced write returned.
//
// The probe itself still tries a direct and an asynchronous write, and
// refuses a file system that offers no direct I/O at all (ramfs), as
// before; tmpfs passes it.
//
// Thread-safety: libraft calls the probe once, from raft_init (its I/O's
// init: raft::Node::start), before any write.
//
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
// a linearizable read or a status waits for it too. raft::Node takes writes
// only on a member that is its own quorum (a single member), where the
// read could not be served from a stalled log anyway; in a cluster every
// write goes to the pool, as before, so a stalled disk never stops a
// member's ticks, heartbeats or votes.
#pragma once

#include <uv.h>

#include <cstddef>

namespace etcdq::raft {

// The consensus loop's side of the inline appends (raft::Node).
class InlineWrites {
 public:
  // Whether an append's write of `bytes` runs on this thread now. Called
  // on the loop's thread, inside libraft's submit.
  virtual bool take(size_t bytes) = 0;
  // The write ran: `after(work, 0)` must run on a later iteration of the
  // same loop, before libraft's writer can close.
  virtual void completed(uv_work_t* work, uv_after_work_cb after) = 0;

 protected:
  ~InlineWrites() = default;
};

// Registers `w` for the calling thread (the loop's), or none (nullptr).
// Thread-local: one loop a thread.
void set_inline_writes(InlineWrites* w);

}  // namespace etcdq::raft

extern "C" {
// libraft's own probe (uv_fs.c), reached under this name by the wrap:
// 0 with *direct (the direct I/O block size, or 0) and *async set, or a
// RAFT_* error with a message in errmsg (RAFT_ERRMSG_BUF_SIZE bytes).
int __real_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg);
// What libraft's probe calls reach: the probe's result, with *direct = 0
// and *async = false on success.
int __wrap_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg);

// libraft's append write (uv_writer.c; its structs stay opaque here).
struct UvWriter;
struct UvWriterReq;
using UvWriterReqCb = void (*)(struct UvWriterReq*, int);
int __real_UvWriterSubmit(struct UvWriter* w, struct UvWriterReq* req, const uv_buf_t bufs[], unsigned n,
                          size_t offset, UvWriterReqCb cb);
int __wrap_UvWriterSubmit(struct UvWriter* w, struct UvWriterReq* req, const uv_buf_t bufs[], unsigned n,
                          size_t offset, UvWriterReqCb cb);
// libuv's, as libraft's calls reach it.
int __real_uv_queue_work(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after);
int __wrap_uv_queue_work(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after);
}
