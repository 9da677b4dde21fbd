// Log segments whose blocks are written before libraft appends to them, so
// that an append is an overwrite the kernel can do without blocking.
//
// libraft 0.15 (Debian's libraft-dev 0.15.0, linked statically from its
// libraft.a) creates each open segment (8 MiB) with posix_fallocate
// (uv_fs.c, UvFsAllocateFile, in its thread pool) and appends to it with
// O_DSYNC writes from libuv's thread pool (raft/log_writes.h). ext4 leaves
// fallocated blocks unwritten: the first write into each 4 KiB block must
// convert its extent, a metadata change that the synced write then commits
// to the journal (a jbd2 commit, and its wake-ups, on top of the data's
// flush) for every append that reaches a new block (a quarter of them at
// 10 clients, nearly all at 1000). (Before raft/log_writes.h, appends were
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
//
// Thread-safety: called by libraft's pool threads; touches only `fd`.
#pragma once

#include <sys/types.h>

extern "C" {
// posix_fallocate's contract: 0, or an error number (errno is not set).
int __wrap_posix_fallocate(int fd, off_t offset, off_t len);
int __real_posix_fallocate(int fd, off_t offset, off_t len);
}
