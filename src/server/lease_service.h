// etcd's Lease service. Grant and Revoke go through the log; KeepAlive and
// TimeToLive use the leader's clocks (lease/lessor.h). Expiry is leader-only
// work outside the service (lease/expiry.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "lease/lessor.h"
#include "server/context.h"
#include "server/ruled_service.h"

namespace etcdq::server {

// LeaseKeepAlive is served raw (ByteBuffers) so that a request that does
// not parse ends the stream as etcd ends it (request_parsing.h
// parse_stream_message), not as the client's half-close.
using LeaseGrpcBase = etcdserverpb::Lease::WithCallbackMethod_LeaseGrant<
    etcdserverpb::Lease::WithCallbackMethod_LeaseRevoke<etcdserverpb::Lease::WithRawCallbackMethod_LeaseKeepAlive<
        etcdserverpb::Lease::WithCallbackMethod_LeaseTimeToLive<
            etcdserverpb::Lease::WithCallbackMethod_LeaseLeases<etcdserverpb::Lease::Service>>>>>;

class LeaseService final : public RuledService<etcdserverpb::Lease, LeaseGrpcBase> {
 public:
  LeaseService(Context* ctx, lease::Lessor* lessor);

  grpc::ServerUnaryReactor* LeaseGrant(grpc::CallbackServerContext* c, const etcdserverpb::LeaseGrantRequest* req,
                                       etcdserverpb::LeaseGrantResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseRevoke(grpc::CallbackServerContext* c, const etcdserverpb::LeaseRevokeRequest* req,
                                        etcdserverpb::LeaseRevokeResponse* resp) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* LeaseKeepAlive(grpc::CallbackServerContext* c) override;
  grpc::ServerUnaryReactor* LeaseTimeToLive(grpc::CallbackServerContext* c,
                                            const etcdserverpb::LeaseTimeToLiveRequest* req,
                                            etcdserverpb::LeaseTimeToLiveResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseLeases(grpc::CallbackServerContext* c, const etcdserverpb::LeaseLeasesRequest* req,
                                        etcdserverpb::LeaseLeasesResponse* resp) override;

 private:
  int64_t next_lease_id();

  Context* ctx_;
  lease::Lessor* lessor_;
};

// The leader's answer to LeaseTimeToLive (its lease clock), checks done:
// TTL -1 for an unknown lease, as etcd; `resp`'s header filled.
void lease_time_to_live(const Context& ctx, const etcdserverpb::LeaseTimeToLiveRequest& req,
                        etcdserverpb::LeaseTimeToLiveResponse* resp);

}  // namespace etcdq::server
