// An etcdq member's data dir built from an etcd snapshot file (the inverse of
// writer.h): what `etcdq snapshot restore` does (cli/snapshot_restore.h),
// as `etcdctl snapshot restore` does for etcd (etcd 3.4
// clientv3/snapshot/v3_snapshot.go Restore; etcdutl/snapshot in 3.5+).
//
// What is carried over, bucket by bucket (writer.h lists the layout):
//   key       every revision the file holds, in revision order: history
//             (create/mod revision, version, lease, value; tombstones),
//             revlog (revisions at or above the finished compaction: the
//             ones a watch may start from), the latest table, the lease ->
//             key index. The current revision is the highest main revision,
//             or the compact revision if that is higher (etcd's
//             kvstore.restore); 1 when there is none.
//   meta      finishedCompactRev / scheduledCompactRev -> our compact
//             finished / scheduled (an unfinished compaction resumes at
//             start, as etcd's restore resumes it). consistent_index and
//             term are not carried: the new cluster's Raft log starts at 1;
//             the log floor (mvcc::kMetaLogFloor) and the applied index
//             are 1, so that a member added later installs this state
//             from a snapshot instead of being sent entry 1
//             (consensus/fsm.h, Fsm::log_floor).
//   lease     id -> TTL (leasepb.Lease ID, TTL; RemainingTTL is dropped: a
//             restored lease's clock starts at its full TTL, as etcd's does
//             when RemainingTTL is unset).
//   auth*     users, roles, the enabled flag and the auth revision, as
//             the auth store's own records (auth/store.h
//             etcd_bucket_record); bcrypt hashes are kept as etcd wrote
//             them ("$2a$", which libcrypt checks).
//   (none)    each key-space plug-in registered rebuilds its records
//             from its keys (keyspace/kind.h, rebuild; the work queues':
//             every message still stored is delivered again, in order, and
//             their indexes go on past the highest; a snapshot file has no
//             bucket for them). The caller registers the plug-ins first
//             (member/member.h, add_key_spaces).
//   members, members_removed, cluster, alarm   dropped: the new cluster's
//             members are the flags' (etcdctl rewrites them the same way);
//             the members publish their names and client URLs when they
//             start. Alarms named the old members.
// The member and cluster ids are stored as a new member stores them, so the
// first start with the same flags finds its own ids: by the caller's
// RestoreOptions::store_identity (member/identity.h keep_identity), since
// the member's records are the member layer's, above this one.
//
// Layer (writer.h says where etcd_snapshot/ sits): the state database is
// created through storage/'s Engine and Batch and filled in the record
// formats the layers below publish — mvcc/codec.h (history, revlog,
// latest, leases, the revision and compaction marks), auth/store.h
// etcd_bucket_record, the plug-ins' rebuild (keyspace/kind.h) — before
// any store is opened on it.
// The data dir has no Raft log: the member bootstraps it from
// --initial-cluster at its first start (initial-cluster-state new), every
// member of the new cluster with the same state, at applied index 1 (that
// configuration entry's), which is also the log floor: the first snapshot
// each member takes drops that entry from its log, and the leader refuses
// MemberAdd until it has (consensus/fsm.h, Fsm::log_floor).
//
// Atomicity: everything is written into a temporary directory beside the
// target (`<data_dir>.restore-tmp-<pid>`), synced, then renamed onto it. On
// any error the temporary directory is removed and the target is untouched;
// one left by a restore that was killed is removed by the next restore into
// the same target (its pid no longer runs).
//
// Memory: streams. One bbolt page per tree level (bbolt/reader.h) and one
// write batch (kBatchBytes) at a time; no per-key state is kept.
//
// Errors: FailedPrecondition when the data dir exists and is not empty
// (etcdctl's words); DataLoss when the file is corrupt, truncated or lacks
// its sha256 trailer (unless skip_hash_check), the message saying which;
// Internal for I/O and storage errors.
//
// Thread-safety: a free function; run it once per data dir.
#pragma once

#include <cstdint>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "storage/engine.h"

namespace etcdq::etcd_snapshot {

struct RestoreOptions {
  std::string snapshot_path;
  std::string data_dir;
  bool skip_hash_check = false;
  // Stores the member's identity in the new database, last before it is
  // synced and moved into place (may be empty: none stored).
  std::function<void(storage::Engine*)> store_identity;
  // Progress while the key bucket is copied, at most once every
  // `progress_every` (may be empty): key bucket entries copied so far, the
  // revision reached, and the bytes of the file's pages read so far of all
  // of them (bbolt::Reader::bytes_read(), pages_bytes()). On the restoring
  // thread.
  struct Progress {
    int64_t revisions = 0;
    int64_t revision = 0;
    uint64_t bytes_read = 0;
    uint64_t bytes_total = 0;
  };
  std::function<void(const Progress&)> on_progress;
  std::chrono::milliseconds progress_every{1000};
};

struct RestoreStats {
  int64_t revisions = 0;         // entries of the key bucket
  int64_t keys = 0;              // live keys at the current revision
  int64_t revision = 0;          // current revision
  int64_t compact_revision = 0;  // finished compaction (0: none)
  int64_t leases = 0;
  int64_t auth_users = 0;
  int64_t auth_roles = 0;
  bool auth_enabled = false;
  // What the key-space plug-ins rebuilt, a line each for the operator
  // (keyspace/kind.h, rebuild); none when they had nothing to rebuild.
  std::vector<std::string> plugin_notes;
};

Error restore_etcd_snapshot(const RestoreOptions& opts, RestoreStats* stats);

}  // namespace etcdq::etcd_snapshot
