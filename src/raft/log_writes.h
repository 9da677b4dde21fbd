// How libraft writes the Raft log: buffered writes to its O_DSYNC segment
// files from libuv's thread pool, as etcd's WAL writes and fdatasyncs from
// its own goroutine; not direct kernel AIO.
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
//
// Thread-safety: libraft calls the probe once, from raft_init (its I/O's
// init: raft::Node::start), before any write.
#pragma once

#include <cstddef>

extern "C" {
// libraft's own probe (uv_fs.c), reached under this name by the wrap:
// 0 with *direct (the direct I/O block size, or 0) and *async set, or a
// RAFT_* error with a message in errmsg (RAFT_ERRMSG_BUF_SIZE bytes).
int __real_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg);
// What libraft's probe calls reach: the probe's result, with *direct = 0
// and *async = false on success.
int __wrap_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg);
}
