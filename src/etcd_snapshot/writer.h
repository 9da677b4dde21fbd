// The member's state in etcd 3.4's backend layout: the ten buckets of its
// bbolt file (etcd 3.4 mvcc/kvstore.go, lease/lessor.go,
// etcdserver/api/membership/store.go, etcdserver/apply.go alarms,
// auth/store.go), from one ReadView (one RocksDB snapshot):
//
//   alarm            marshalled AlarmMember -> ""            (active alarms)
//   auth             "authRevision" -> 8-byte BE 1         (etcdq has no auth: disabled,
//                                                            as a fresh etcd 3.4 writes it)
//   authRoles, authUsers                       empty
//   cluster          "clusterVersion" -> "3.4.0"
//   key              mvcc/etcd_keys.h: every retained revision, tombstones
//   lease            8-byte BE id -> leasepb.Lease{ID, TTL}  (RemainingTTL 0: etcd 3.4
//                                                            checkpoints it only on request)
//   members          hex id -> JSON {"id","peerURLs","isLearner"?,"name"?,"clientURLs"?}
//   members_removed  empty (etcdq keeps no list of removed ids)
//   meta             consistent_index -> 8-byte BE applied index of the view;
//                    finishedCompactRev, scheduledCompactRev -> 17-byte revision key
//                    (when compacted; physical progress is ours, so both say C)
//
// Members and alarms come from the member's tables (Tables below, read by
// the caller right after it took the view), not from the view: they are
// not in MVCC; both are replicated, so equal on every member that has
// applied the same log.
//
// Layer: etcd_snapshot/ sits below member/, beside bbolt/ (CMakeLists.txt):
// it needs bbolt/ for the file and the record formats the layers under it
// publish — mvcc/etcd_keys.h and mvcc/codec.h for the key history and
// leases, auth/store.h for users and roles (restore.h), the key-space
// plug-ins' rebuild (keyspace/registry.h, restore.h) — and storage/'s
// ReadView and Engine, nothing of the member that runs them. Not inside
// bbolt/: that one only knows bbolt's format.
//
// Thread-safety: any thread; reads only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "mvcc/store.h"

namespace etcdq::etcd_snapshot {

// The replicated state a snapshot holds that is not in MVCC.
struct Tables {
  std::vector<etcdserverpb::AlarmMember> alarms;  // the active ones
  std::vector<etcdserverpb::Member> members;      // as Cluster.MemberList answers
};

// Receives buckets and keys in bbolt's order (bucket names and keys bytewise
// ascending).
class BucketSink {
 public:
  virtual ~BucketSink() = default;
  virtual Error begin_bucket(std::string_view name) = 0;
  virtual Error put(std::string_view key, std::string_view value) = 0;
  virtual Error end_bucket() = 0;
};

Error write_etcd_buckets(const Tables& tables, const mvcc::ReadView& view, BucketSink* out);

// etcd 3.4's Maintenance.Hash (mvcc/backend/backend.go Hash with
// kvstore.go DefaultIgnores): CRC-32C over every bucket's name, then its
// keys and values, skipping meta/consistent_index. Over our buckets, so it
// never equals an etcd member's number (member ids and URLs differ), but it
// is equal on every member of an etcdq cluster at the same revision.
Error etcd_hash(const Tables& tables, const mvcc::ReadView& view, uint32_t* hash);

// How far the key bucket is written: the main revision reached (of the
// view's revision) and the entries written so far. Called every 256
// entries, on the writing thread.
using KeyProgress = std::function<void(int64_t revision, int64_t entries)>;

// Writes etcd's snapshot file to `path`: the bbolt database, then its
// sha256 (bbolt/snapshot_file.h). On error no file is left at `path`.
// Memory: bbolt/writer.h's bound plus mvcc/etcd_keys.h's. `on_key` (may be
// empty): progress, see KeyProgress.
Error write_etcd_snapshot(const Tables& tables, const mvcc::ReadView& view, const std::string& path,
                          const KeyProgress& on_key = {});

}  // namespace etcdq::etcd_snapshot
