// etcd's Lease service. Grant and Revoke go through the log; KeepAlive and
// TimeToLive use the leader's clocks (member/leases.h). Expiry is leader-only
// work outside the service (lease/expiry.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
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
  explicit LeaseService(Context* ctx);

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
  Context* ctx_;
};

}  // namespace etcdq::server
