// etcd's data corruption checks (server/etcdserver/corrupt.go, etcd 3.6):
// members compare the hash of their key-value history (etcd's HashKV:
// mvcc/etcd_keys.h) at the same revision, asked of each other on the peer
// URL only (Peer.HashKV, proto/etcdq/peer.proto).
//
//  - The initial check (--experimental-initial-corrupt-check; etcd 3.6's
//    InitialCorruptCheck feature gate): before a restarted member serves
//    anyone, it hashes its own state at its revision and asks every other
//    member for theirs at that revision. A peer whose hash differs while
//    the compact revisions agree is a mismatch, and the member refuses to
//    start ("<id> found data inconsistency with peers"). A peer that cannot
//    answer (unreachable, behind: "future revision", ahead past a
//    compaction: "compacted", another cluster) is skipped with a warning:
//    the check can only prove a difference, never that none exists.
//  - The periodic check (--corrupt-check-time, or the deprecated
//    --experimental-corrupt-check-time; 0: off): every interval the leader
//    hashes its state (h), asks the others at h's revision, confirms its
//    leadership with a linearizable read, hashes again (h2), and raises a
//    CORRUPT alarm through the log (at most one a pass, as etcd) for
//    itself if its own hash at the same revision changed, or for the first
//    follower that is ahead of it (revision or compact revision) or whose
//    hash differs at the same compact revision. The apply chain then
//    refuses every write (apply/corrupt_layer.h) until an operator
//    disarms the alarm.
//
// The rules are pure functions (initial_verdict, periodic_verdicts) so
// they can be tested without a cluster; CorruptionChecker runs them over
// hooks the member supplies.
//
// Thread-safety: the free functions are pure. CorruptionChecker:
// initial_check() and periodic_check() block (they wait on peers, each for
// at most the hooks' timeout) and must not run on a gRPC or consensus
// thread; set_leading() from any thread; start()/stop() from one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "etcdq/peer.pb.h"

namespace etcdq::member {

// One member's hash of its key-value history (etcd's mvcc.KeyValueHash).
struct KvHash {
  uint32_t hash = 0;
  int64_t revision = 0;          // hashed up to (and including) this revision
  int64_t compact_revision = 0;  // the member's compact revision when it hashed
};

// What one peer answered, or why it did not.
struct PeerHash {
  uint64_t id = 0;       // the member asked
  std::string address;   // its peer host:port
  bool ok = false;       // an answer that passed check_peer_answer()
  KvHash hash;           // when ok
  int64_t current_revision = 0;  // when ok: the peer's revision when it answered
  Error error;           // when not ok
};

// Checks a peer's answer to HashKV{revision = asked, cluster_id} before it
// is believed: it must come from member `expected_id` of cluster
// `cluster_id`, hash exactly the revision asked, and its revisions must be
// consistent (-1 <= compact revision < asked <= current revision; -1:
// never compacted, as etcd's store starts). An answer
// that fails is an error (InvalidArgument "malformed hash answer: ..."),
// and the peer is then skipped like one that did not answer.
Error check_peer_answer(uint64_t expected_id, uint64_t cluster_id, int64_t asked, const peer::HashKVResponse& r);

// The errors a peer answers HashKV with, as etcd's HashByRev tells them
// apart (corrupt.go): the revision asked is past the peer's, at or below
// its compaction, or the peer is in another cluster.
bool is_future_rev(const Error& e);
bool is_compacted(const Error& e);
bool is_cluster_mismatch(const Error& e);
// The answer's text for another cluster's request (etcd's
// rafthttp.ErrClusterIDMismatch).
inline constexpr const char* kClusterIdMismatch = "cluster ID mismatch";

// etcd's InitialCheck, for one peer.
enum class InitialVerdict {
  kMatch,             // same hash
  kMismatch,          // different hash, same compact revision: corruption
  kCompactDiffers,    // different hash, different compact revision: not comparable
  kPeerBehind,        // "cannot fetch hash from slow remote peer" (future revision)
  kLocalBehind,       // "cannot fetch hash from remote peer; local member is behind" (compacted)
  kClusterMismatch,   // "cluster ID mismatch"
  kNoAnswer,          // unreachable, timed out, or a malformed answer
};
InitialVerdict initial_verdict(const KvHash& local, const PeerHash& peer);

// etcd's PeriodicCheck: `h` is the leader's hash before it asked the peers
// (at h.revision), `h2` after its linearizable read (at the revision then,
// `rev2`). Returns the members to raise CORRUPT for, in etcd's order: at
// most one (etcd raises once a pass), empty when all is well. `reasons`
// gets one line per violation found (etcd's warnings), for the log.
std::vector<uint64_t> periodic_verdicts(uint64_t self, const KvHash& h, const KvHash& h2, int64_t rev2,
                                        const std::vector<PeerHash>& peers, std::vector<std::string>* reasons);

class CorruptionChecker {
 public:
  struct Hooks {
    uint64_t self = 0;
    // This member's hash at its current revision.
    std::function<Error(KvHash*)> local_hash;
    // Every other member's answer at `revision` (blocks; each peer bounded
    // by the request timeout).
    std::function<std::vector<PeerHash>(int64_t revision)> peer_hashes;
    // Blocks until a linearizable read could be served (leadership
    // confirmed, everything committed before applied) or fails.
    std::function<Error()> linearizable_read;
    // Proposes Alarm{ACTIVATE, CORRUPT, member}; does not wait.
    std::function<void(uint64_t member)> raise_corrupt;
    std::chrono::milliseconds timeout{5000};  // for the log: the request timeout
  };

  explicit CorruptionChecker(Hooks hooks) : hooks_(std::move(hooks)) {}
  ~CorruptionChecker();  // stop()
  CorruptionChecker(const CorruptionChecker&) = delete;
  CorruptionChecker& operator=(const CorruptionChecker&) = delete;

  // etcd's InitialCheck: OK, or "<self id> found data inconsistency with
  // peers" (FailedPrecondition) when any peer mismatched, or the local
  // hash's error ("<self id> failed to fetch hash (...)").
  Error initial_check();
  // etcd's PeriodicCheck: one pass (the leader's; does not ask whether it
  // leads). Errors: the local hash or the linearizable read failed.
  Error periodic_check();

  // Runs periodic_check() every `interval` while set_leading(true), as
  // etcd's monitorKVHash ticks on every member and checks on the leader.
  void start(std::chrono::milliseconds interval);
  void set_leading(bool leading);
  // Waits for a pass in flight; idempotent.
  void stop();

 private:
  void run(std::chrono::milliseconds interval);

  Hooks hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool leading_ = false;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace etcdq::member
