// etcd's Maintenance service: Status (what `etcdctl endpoint status` shows),
// Alarm (get, activate, deactivate; apply/alarms.h) and Defragment
// (RocksDB compacts its files in the background; nothing stops meanwhile).
// MoveLeader (on the leader: libraft's leadership transfer) and HashKV.
// Hash, Snapshot and Downgrade answer Unimplemented.
#pragma once

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "server/context.h"
#include "server/request_parsing.h"

namespace etcdq::server {

// The etcd API version etcdq implements, reported by Status.
inline constexpr const char* kEtcdApiVersion = "3.5.0";

class MaintenanceService final : public StrictParsing<etcdserverpb::Maintenance> {
 public:
  explicit MaintenanceService(Context* ctx) : ctx_(ctx) {
    strict_parsing("Alarm", &MaintenanceService::Alarm, {});
    strict_parsing("Status", &MaintenanceService::Status, {});
    strict_parsing("Defragment", &MaintenanceService::Defragment, {});
    strict_parsing("HashKV", &MaintenanceService::HashKV, {});
    strict_parsing("MoveLeader", &MaintenanceService::MoveLeader, {});
  }

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

 private:
  Context* ctx_;
};

// HashKV's hash: CRC-32 (zlib) over every key live at `rev` with its
// create/mod revision, version, lease and value, in key order. Equal on
// members that applied the same log, whatever their physical compaction
// did; not equal to etcd's number (its hash walks its own bbolt layout).
// Errors: compacted() / future_rev() for `rev`.
Error hash_kv(const mvcc::ReadView& view, int64_t rev, uint32_t* out);

}  // namespace etcdq::server
