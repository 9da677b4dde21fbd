// etcd's Lock service (v3lockpb; etcd's api/v3lock): Lock waits until the
// caller's key `name/<lease hex>` has the lowest create revision under
// `name/` (clientv3's Mutex, run in-process), and answers with that key;
// Unlock deletes the key. A Lock whose call is canceled while waiting
// removes its key. Lease 0 gets a new 60 s lease, as etcd's session does.
// Like every client service, its calls pass etcd's interceptor rules first
// (server/call_rules.h): a learner refuses them, and so does a member
// without a leader when the call asks "hasleader", as etcd, which serves
// v3lock on the same gRPC server as KV.
#pragma once

#include "etcd/api/v3lock/v3lock.grpc.pb.h"
#include "server/local_client.h"
#include "server/ruled_service.h"

namespace etcdq::server {

class LockService final : public RuledService<v3lockpb::Lock> {
 public:
  explicit LockService(LocalClient* client) : RuledService(client->context()), client_(client) {
    unary("Lock", &LockService::Lock, {});
    unary("Unlock", &LockService::Unlock, {});
  }
  grpc::ServerUnaryReactor* Lock(grpc::CallbackServerContext* c, const v3lockpb::LockRequest* req,
                                 v3lockpb::LockResponse* resp) override;
  grpc::ServerUnaryReactor* Unlock(grpc::CallbackServerContext* c, const v3lockpb::UnlockRequest* req,
                                   v3lockpb::UnlockResponse* resp) override;

 private:
  LocalClient* client_;
};

// etcd's default session TTL (concurrency.NewSession), in seconds.
inline constexpr int64_t kSessionTtlSeconds = 60;

}  // namespace etcdq::server
