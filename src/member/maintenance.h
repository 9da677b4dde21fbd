// The member's maintenance calls as the Maintenance service and the peer
// server need them, shaped like etcd's (server/etcdserver/v3_server.go and
// api/v3rpc/maintenance.go: Status's sizes, Alarm GET, Defragment, Hash,
// HashKV, Snapshot) plus what a member sends another one for a consensus
// snapshot (Peer.FetchSnapshot). Alarm changes, MoveLeader and the member
// changes are proposals or membership calls (member/answers.h,
// member/membership.h); permissions are member/auth.h's.
//
// Units: sizes in bytes; revisions as mvcc's (int64, > 0 once written).
// Thread-safety: any thread. defragment(), hash(), hash_kv() and
// write_snapshot() make a full pass over the data and block for it: call
// them off gRPC's threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bbolt/snapshot_file.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "member/context.h"

namespace etcdq::member::maintenance {

// etcd's Status dbSize (the backend's file size; never 0: etcdctl divides
// by it) and dbSizeInUse (what the data takes now).
struct DbSize {
  int64_t bytes = 0;
  int64_t in_use_bytes = 0;
};
DbSize db_size(const Context& ctx);

// The alarms raised (etcd's Alarm GET and Status's errors): member 0 and
// type NONE match all.
std::vector<etcdserverpb::AlarmMember> alarms(const Context& ctx, uint64_t member_id, etcdserverpb::AlarmType type);

// Registers the families below at 0 (etcd shows them before any call):
// etcd_disk_backend_defrag_duration_seconds and etcd_disk_defrag_inflight
// (defragment), etcd_disk_backend_snapshot_duration_seconds (write_snapshot,
// building the file a client's Snapshot streams), etcd_mvcc_hash_duration_seconds
// (hash) and etcd_mvcc_hash_rev_duration_seconds (hash_kv, the corruption
// checks' too), with etcd's names, help and buckets.
void register_metrics();

// etcd's Defragment: reclaims what deleted and compacted data took (a full
// compaction of the storage engine), while reads and writes go on. Blocks
// until done; storage's error.
Error defragment(Context& ctx);

// etcd's HashKV (mvcc/etcd_keys.h etcd_hash_kv): the CRC-32C etcd computes
// over the key space at `revision` (<= 0: the current one). Errors:
// errors::compacted() at or below the compact revision, future_rev() above
// the current one.
struct KvHash {
  uint32_t hash = 0;
  int64_t revision = 0;          // the current revision of the view hashed
  int64_t hash_revision = 0;     // the revision the hash covers
  // The compaction watermark: -1 until the first compaction, as etcd's
  // compactMainRev (the peer check passes it on as it is).
  int64_t compact_revision = -1;
};
Error hash_kv(const Context& ctx, int64_t revision, KvHash* out);

// etcd's Hash: the CRC-32 of the whole backend as etcd's snapshot file
// would hold it now (etcd_snapshot/writer.h etcd_hash); `revision` gets the
// current revision it covers.
Error hash(const Context& ctx, uint32_t* out, int64_t* revision);

// etcd's Snapshot: writes the state as etcd's snapshot file (a bbolt
// database followed by its sha256, etcd_snapshot/writer.h) to `path`.
Error write_snapshot(const Context& ctx, const std::string& path);
// The trailer write_snapshot() appends: the database's sha256, this long.
inline constexpr uint64_t kSnapshotSha256Bytes = bbolt::kSha256Bytes;
// Where snapshot files are staged: the data dir, beside the database.
std::string snapshot_dir(const Context& ctx);

// Peer.FetchSnapshot: every (column family number, key, value) of the
// state as it is now, at `min_index` or later, in column family then key
// order (member/fsm.h stream_state), all but latest's when
// `without_latest`; stops at the first error `fn` returns and returns it.
// Errors: an internal error when the state is behind `min_index`.
using SnapshotVisitor = std::function<Error(uint32_t cf, std::string_view key, std::string_view value)>;
Error read_state(const Context& ctx, uint64_t min_index, bool without_latest, const SnapshotVisitor& fn);

}  // namespace etcdq::member::maintenance
