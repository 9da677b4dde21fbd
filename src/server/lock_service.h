// etcd's Lock service (v3lockpb; etcd's api/v3lock): Lock waits until the
// caller's key `name/<lease hex>` has the lowest create revision under
// `name/` (clientv3's Mutex, run in-process), and answers with that key;
// Unlock deletes the key. A Lock whose call is canceled while waiting
// removes its key. Lease 0 gets a new 60 s lease, as etcd's session does.
#pragma once

#include "etcd/api/v3lock/v3lock.grpc.pb.h"
#include "server/local_client.h"
#include "server/request_parsing.h"

namespace etcdq::server {

class LockService final : public StrictParsing<v3lockpb::Lock> {
 public:
  explicit LockService(LocalClient* client) : client_(client) {
    strict_parsing("Lock", &LockService::Lock, {});
    strict_parsing("Unlock", &LockService::Unlock, {});
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
