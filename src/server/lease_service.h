// etcd's Lease service. Grant and Revoke go through the log; KeepAlive and
// TimeToLive use the leader's clocks (lease/lessor.h). A background loop on
// the leader proposes a revoke for every lease whose clock ran out, as
// etcd's lessor does (revokeExpiredLeases), so expiry is an ordinary,
// replicated delete of the attached keys that watchers see.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "lease/lessor.h"
#include "server/context.h"
#include "server/request_parsing.h"

namespace etcdq::server {

class LeaseService final : public StrictParsing<etcdserverpb::Lease> {
 public:
  LeaseService(Context* ctx, lease::Lessor* lessor);
  ~LeaseService() override;  // stops the expiry loop

  grpc::ServerUnaryReactor* LeaseGrant(grpc::CallbackServerContext* c, const etcdserverpb::LeaseGrantRequest* req,
                                       etcdserverpb::LeaseGrantResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseRevoke(grpc::CallbackServerContext* c, const etcdserverpb::LeaseRevokeRequest* req,
                                        etcdserverpb::LeaseRevokeResponse* resp) override;
  grpc::ServerBidiReactor<etcdserverpb::LeaseKeepAliveRequest, etcdserverpb::LeaseKeepAliveResponse>*
  LeaseKeepAlive(grpc::CallbackServerContext* c) override;
  grpc::ServerUnaryReactor* LeaseTimeToLive(grpc::CallbackServerContext* c,
                                            const etcdserverpb::LeaseTimeToLiveRequest* req,
                                            etcdserverpb::LeaseTimeToLiveResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseLeases(grpc::CallbackServerContext* c, const etcdserverpb::LeaseLeasesRequest* req,
                                        etcdserverpb::LeaseLeasesResponse* resp) override;

  // Stops the expiry loop and waits for it (the member is shutting down).
  // Idempotent.
  void stop();

 private:
  void expiry_loop();
  int64_t next_lease_id();

  Context* ctx_;
  lease::Lessor* lessor_;
  std::mutex mu_;  // guards revoking_, stop_
  std::condition_variable cv_;
  std::set<int64_t> revoking_;  // revokes proposed, not yet applied
  bool stop_ = false;
  std::thread expiry_thread_;
};

}  // namespace etcdq::server
