// etcd's Maintenance service: Status (what `etcdctl endpoint status` shows),
// Alarm (get, activate, deactivate; apply/alarms.h) and Defragment
// (RocksDB compacts its files in the background; nothing stops meanwhile).
// MoveLeader (on the leader: libraft's leadership transfer). HashKV and
// Hash as etcd 3.4 computes them, over the state in etcd's layout
// (mvcc/etcd_keys.h, etcd_snapshot/writer.h). Snapshot streams etcd's
// snapshot file (etcd_snapshot/writer.h) as etcd 3.4 does
// (etcdserver/api/v3rpc/maintenance.go): SnapshotResponse chunks of 32 KiB
// with the bytes still to come, then one chunk with the sha256 of the
// database (remaining_bytes 0). The file is built first, from one read
// view, in a temporary file beside the database ("etcd-snapshot-*.tmp" in
// the parent of the RocksDB dir, removed when the call ends; leftovers are
// removed when the service starts); at most kMaxSnapshots at once, more get
// RESOURCE_EXHAUSTED. Downgrade validates as etcd 3.6 and refuses to enable
// (server/downgrade.h: etcdq cannot rewrite its storage for an older etcd).
#pragma once

#include <atomic>
#include <memory>

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "server/context.h"
#include "server/ruled_service.h"

namespace etcdq::server {

// The etcd API version etcdq implements, reported by Status (version and
// storageVersion) and /version (etcdserver, etcdcluster, storage). Clients
// decide what to send from it: kube-apiserver >= 1.31 turns on
// RequestWatchProgress, and with it ConsistentListFromCache and WatchList,
// only for 3.4.31+, 3.5.13+ or 3.6 (k8s.io/apiserver, storage/feature/
// feature_support_checker.go); 3.5.0 kept them off. 3.6.0, not a patch
// release: etcdq follows etcd 3.6's API and behaviour, not one patch of it
// (etcd's own cluster version is major.minor.0 the same way). Downgrade's
// cluster version derives from it too (server/downgrade.h).
inline constexpr const char* kEtcdApiVersion = "3.6.0";

class MaintenanceService final : public RuledService<etcdserverpb::Maintenance> {
 public:
  explicit MaintenanceService(Context* ctx) : RuledService(ctx), ctx_(ctx) {
    unary("Alarm", &MaintenanceService::Alarm, {});
    unary("Status", &MaintenanceService::Status, {});
    unary("Defragment", &MaintenanceService::Defragment, {});
    unary("HashKV", &MaintenanceService::HashKV, {});
    unary("MoveLeader", &MaintenanceService::MoveLeader, {});
    unary("Hash", &MaintenanceService::Hash, {});
    unary("Downgrade", &MaintenanceService::Downgrade, {});
    // etcd 3.6 lets a learner stream a snapshot (interceptor.go, snapshotMethod).
    server_stream("Snapshot", &MaintenanceService::Snapshot, /*learner_ok=*/true);
    remove_leftover_snapshots();
  }

  static constexpr int kMaxSnapshots = 2;
  static constexpr int kMaxHashes = 2;  // Hash and HashKV at once; more: RESOURCE_EXHAUSTED

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* c, const etcdserverpb::StatusRequest* req,
                                   etcdserverpb::StatusResponse* resp) override;
  grpc::ServerUnaryReactor* Alarm(grpc::CallbackServerContext* c, const etcdserverpb::AlarmRequest* req,
                                  etcdserverpb::AlarmResponse* resp) override;
  grpc::ServerUnaryReactor* Defragment(grpc::CallbackServerContext* c,
                                       const etcdserverpb::DefragmentRequest* req,
                                       etcdserverpb::DefragmentResponse* resp) override;
  grpc::ServerUnaryReactor* MoveLeader(grpc::CallbackServerContext* c, const etcdserverpb::MoveLeaderRequest* req,
                                       etcdserverpb::MoveLeaderResponse* resp) override;
  grpc::ServerUnaryReactor* HashKV(grpc::CallbackServerContext* c, const etcdserverpb::HashKVRequest* req,
                                   etcdserverpb::HashKVResponse* resp) override;
  grpc::ServerUnaryReactor* Hash(grpc::CallbackServerContext* c, const etcdserverpb::HashRequest* req,
                                 etcdserverpb::HashResponse* resp) override;
  grpc::ServerUnaryReactor* Downgrade(grpc::CallbackServerContext* c, const etcdserverpb::DowngradeRequest* req,
                                      etcdserverpb::DowngradeResponse* resp) override;
  grpc::ServerWriteReactor<etcdserverpb::SnapshotResponse>* Snapshot(grpc::CallbackServerContext* c,
                                                                     const etcdserverpb::SnapshotRequest* req) override;

 private:
  void remove_leftover_snapshots();

  Context* ctx_;
  std::shared_ptr<std::atomic<int>> snapshots_ = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> hashes_ = std::make_shared<std::atomic<int>>(0);
};


}  // namespace etcdq::server
