// Every patch etcdq makes to libraft, in one place. libraft is Debian's
// libraft-dev, exactly 0.15.0, linked statically from its libraft.a
// (CMakeLists.txt, target etcdq_libraft). Each patch replaces one function
// at link time: the link passes -Wl,--wrap=<name>, so every reference to
// <name> from another object file (libraft's, or ours) reaches
// __wrap_<name> below, and __real_<name> is the original. References inside
// the object that defines the function are not redirected. So a patch fits
// only a libraft whose objects are laid out as 0.15.0's are (which object
// defines and which calls each function) and whose internals it relies on
// are 0.15.0's; the test libraft.patches_fit (tests/libraft/) checks the
// linked libraft.a for both, and src/consensus/libraft_patches_test.cc checks the
// patched behaviour against the original.
//
// The patches (consensus/libraft_patches.cc, each with the reason in full):
//   1. progressToProbe (progress.c): a leader resumes replication one
//      index past a snapshot it sent, not at it, and at once (pipeline, not
//      probe) when the follower reported it installed.
//   2. posix_fallocate (as uv_os.c calls it): log segments are written
//      with zeros before libraft appends to them.
//   3. UvFsProbeCapabilities (uv_fs.c): buffered log writes synced on
//      libuv's pool, not O_DIRECT kernel AIO.
//   4. UvWriterSubmit (uv_writer.c) and 5. uv_queue_work (libuv, as
//      libraft's objects call it): an idle consensus thread writes a small
//      append itself (InlineWrites below).
//   6. progressToSnapshot and 7. progressMaybeDecrement (progress.c): a
//      leader resends a snapshot its follower dropped at once (not after the
//      install-snapshot timeout), and walks back over a follower's divergent
//      entries a term at a time (not an index a heartbeat); patch 6 records
//      the snapshots sent (snapshots_sent below).
//   8. progressShouldReplicate and progressMarkRecentRecv (progress.c): a
//      leader probing a follower waits for its answer to the last append
//      (up to half an election timeout) before it sends the entries again.
//   9. Not a wrap: send_commit_now below calls libraft's own
//      replicationHeartbeat (replication.c) so that followers hear of a
//      commit at once, not at the next append or heartbeat.
//  10. Not a wrap: a follower keeps a commit index it heard before the
//      entries it covers were stored, and applies it once they are
//      (HeardCommit below; libraft's replicationApply).
//  11. byteCrc32 (byte.c): libraft's checksum computed by ISA-L's
//      crc32_ieee, the same CRC at tens of GB/s instead of ~100 MB/s
//      (consensus/libraft_crc.cc).
#pragma once

extern "C" {
#include <raft.h>
}
#include <sys/types.h>
#include <uv.h>

#include <cstddef>
#include <vector>

namespace etcdq::consensus {

// Patches 4 and 5: the consensus loop's side of the inline appends
// (consensus::Node).
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

// Patch 6: the last snapshot leader `r` sent to each follower that got one
// (its id, the snapshot's index, and the leader's clock, ms, at the send).
// Kept until forget_snapshots_sent(r) (when the node closes). Thread-safe.
struct SnapshotSent {
  raft_id id = 0;
  raft_index index = 0;
  raft_time at = 0;
};
std::vector<SnapshotSent> snapshots_sent(const struct raft* r);
// Patch 6: the InstallSnapshot message to member `id` went to the transport
// of the raft whose I/O is `io` (consensus/io.cc, UvIo's send): only
// answers to messages sent after it can tell that the follower dropped it.
// The loop thread (libraft's send).
void snapshot_on_wire(const struct raft_io* io, raft_id id);
// Forgets what patches 6 and 8 recorded for `r` (when its node closes, or
// before a node starts at an address another used).
void forget_snapshots_sent(const struct raft* r);
void forget_answers(const struct raft* r);

// 9. An empty AppendEntries (a heartbeat, carrying the commit index) now
// to every follower in pipeline state (the steady state), whatever was
// last sent to it; other followers are left to libraft's pacing. `r` must
// lead. The consensus thread only: from libraft's callbacks, as
// raft_barrier may be called there.
void send_commit_now(struct raft* r);

// 10. What a follower heard of the leader's commit index that libraft
// could not use yet: the entries it covers were still being written.
// Consensus thread only, like the raft it belongs to.
class HeardCommit {
 public:
  // What an AppendEntries vouches for, read before libraft takes `m`
  // (it owns the message's entries after): its term, the highest index
  // it says this member's log matches the leader's up to, and the
  // leader's commit index capped there. Not an AppendEntries: nothing.
  struct Vouch {
    raft_term term = 0;
    raft_index match_index = 0;
    raft_term match_term = 0;
    raft_index commit = 0;
  };
  static Vouch vouch_of(const struct raft_message& m);
  // After libraft handled the message `v` came from: keeps v's commit if
  // `r` is a follower in v's term whose log holds the entry v names, with
  // its term (so, by Raft's log matching, every entry up to it is the
  // leader's), whether or not libraft could apply it yet.
  void heard(struct raft* r, const Vouch& v);
  // Applies what was heard up to what `r` has stored, if libraft's own
  // commit index is behind it. After libraft learned of a stored append
  // (consensus/log_appends.cc) and after each message.
  void apply(struct raft* r) const;

 private:
  raft_term term_ = 0;
  raft_index index_ = 0;
};

}  // namespace etcdq::consensus

extern "C" {
// 1. libraft's own function (progress.c), reached under this name by the
// wrap. What libraft's progressToProbe calls reach: r is a leader, i a
// server's index in its configuration (libraft's caller checked both).
// Called on the consensus thread only; touches only progress entry i.
void __real_progressToProbe(struct raft* r, unsigned i);
void __wrap_progressToProbe(struct raft* r, unsigned i);

// 6. and 7. libraft's own functions (progress.c), under these names by the
// wrap, and what the wrappers call of libraft's (log.c, progress.c). r is a
// leader and i a server's index in its configuration; the consensus thread.
void __real_progressToSnapshot(struct raft* r, unsigned i);
void __wrap_progressToSnapshot(struct raft* r, unsigned i);
bool __real_progressMaybeDecrement(struct raft* r, unsigned i, raft_index rejected, raft_index last_index);
bool __wrap_progressMaybeDecrement(struct raft* r, unsigned i, raft_index rejected, raft_index last_index);
void progressAbortSnapshot(struct raft* r, unsigned i);
// 8. (progress.c), as for 6 and 7.
bool __real_progressShouldReplicate(struct raft* r, unsigned i);
bool __wrap_progressShouldReplicate(struct raft* r, unsigned i);
void __real_progressMarkRecentRecv(struct raft* r, unsigned i);
void __wrap_progressMarkRecentRecv(struct raft* r, unsigned i);
raft_term logTermOf(struct raft_log* l, raft_index index);

// 2. posix_fallocate's contract: 0, or an error number (errno is not set).
// Called by libraft's pool threads; touches only `fd`.
int __wrap_posix_fallocate(int fd, off_t offset, off_t len);
int __real_posix_fallocate(int fd, off_t offset, off_t len);

// 3. libraft's own probe (uv_fs.c): 0 with *direct (the direct I/O block
// size, or 0) and *async set, or a RAFT_* error with a message in errmsg
// (RAFT_ERRMSG_BUF_SIZE bytes). The wrap returns the probe's result, with
// *direct = 0 and *async = false on success. libraft calls it once, from
// raft_init (consensus::Node::start), before any write.
int __real_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg);
int __wrap_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg);

// 4. libraft's append write (uv_writer.c; its structs stay opaque here).
struct UvWriter;
struct UvWriterReq;
using UvWriterReqCb = void (*)(struct UvWriterReq*, int);
int __real_UvWriterSubmit(struct UvWriter* w, struct UvWriterReq* req, const uv_buf_t bufs[], unsigned n,
                          size_t offset, UvWriterReqCb cb);
int __wrap_UvWriterSubmit(struct UvWriter* w, struct UvWriterReq* req, const uv_buf_t bufs[], unsigned n,
                          size_t offset, UvWriterReqCb cb);
// 9. libraft's own (replication.c, 0.15; what its tick calls): an
// AppendEntries to each follower that progressShouldReplicate says is due
// one (entries it lacks, or a heartbeat once an interval passed since the
// last send to it). Errors are only logged by libraft; returns 0.
int replicationHeartbeat(struct raft* r);
// 10. libraft's own (replication.c, 0.15): apply every entry up to
// r->commit_index (leader or follower; returns libraft's error, which its
// own callers only trace); and whether a snapshot install is under way
// (then r->last_stored is 0 and nothing may commit).
int replicationApply(struct raft* r);
bool replicationInstallSnapshotBusy(struct raft* r);
// 5. libuv's, as libraft's calls reach it.
int __real_uv_queue_work(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after);
int __wrap_uv_queue_work(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after);
}
