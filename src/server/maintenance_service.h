// etcd's Maintenance service: Status (what `etcdctl endpoint status` shows),
// Alarm (get, activate, deactivate; apply/alarms.h) and Defragment
// (RocksDB compacts its files in the background; nothing stops meanwhile).
// Hash, HashKV, Snapshot, MoveLeader and Downgrade answer Unimplemented.
#pragma once

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "server/context.h"

namespace etcdq::server {

// The etcd API version etcdq implements, reported by Status.
inline constexpr const char* kEtcdApiVersion = "3.5.0";

class MaintenanceService final : public etcdserverpb::Maintenance::CallbackService {
 public:
  explicit MaintenanceService(Context* ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* c, const etcdserverpb::StatusRequest* req,
                                   etcdserverpb::StatusResponse* resp) override;
  grpc::ServerUnaryReactor* Alarm(grpc::CallbackServerContext* c, const etcdserverpb::AlarmRequest* req,
                                  etcdserverpb::AlarmResponse* resp) override;
  grpc::ServerUnaryReactor* Defragment(grpc::CallbackServerContext* c,
                                       const etcdserverpb::DefragmentRequest* req,
                                       etcdserverpb::DefragmentResponse* resp) override;

 private:
  Context* ctx_;
};

class ClusterService final : public etcdserverpb::Cluster::CallbackService {
 public:
  explicit ClusterService(Context* ctx) : ctx_(ctx) {}
  grpc::ServerUnaryReactor* MemberList(grpc::CallbackServerContext* c,
                                       const etcdserverpb::MemberListRequest* req,
                                       etcdserverpb::MemberListResponse* resp) override;

 private:
  Context* ctx_;
};

}  // namespace etcdq::server
