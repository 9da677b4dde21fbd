// etcd's Cluster service: membership as libraft's configuration holds it
// (ids, peer addresses, voter or learner), with the names and client URLs
// members publish (apply/members.h).
//
// Changes need the root role (etcd's checkMembershipOperationPermission,
// checked on the member the client called) and run on the leader; a
// follower passes the call to the leader's Peer service with the checked
// caller (server/forwarded_calls.h) and answers with the leader's result. Member ids of added
// members derive from their peer URLs and this member's
// --initial-cluster-token, as for the initial cluster (member/identity.h),
// so the new member computes the same id from its own flags; it must be
// started with the same token. MemberUpdate can only keep a member's peer
// address: libraft 0.15 cannot change one.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "server/context.h"
#include "server/ruled_service.h"

namespace etcdq::server {

class ClusterService final : public RuledService<etcdserverpb::Cluster> {
 public:
  explicit ClusterService(Context* ctx) : RuledService(ctx), ctx_(ctx) {
    unary("MemberAdd", &ClusterService::MemberAdd, {});
    unary("MemberRemove", &ClusterService::MemberRemove, {});
    unary("MemberUpdate", &ClusterService::MemberUpdate, {});
    unary("MemberList", &ClusterService::MemberList, {});
    unary("MemberPromote", &ClusterService::MemberPromote, {});
  }
  grpc::ServerUnaryReactor* MemberList(grpc::CallbackServerContext* c, const etcdserverpb::MemberListRequest* req,
                                       etcdserverpb::MemberListResponse* resp) override;
  grpc::ServerUnaryReactor* MemberAdd(grpc::CallbackServerContext* c, const etcdserverpb::MemberAddRequest* req,
                                      etcdserverpb::MemberAddResponse* resp) override;
  grpc::ServerUnaryReactor* MemberRemove(grpc::CallbackServerContext* c,
                                         const etcdserverpb::MemberRemoveRequest* req,
                                         etcdserverpb::MemberRemoveResponse* resp) override;
  grpc::ServerUnaryReactor* MemberPromote(grpc::CallbackServerContext* c,
                                          const etcdserverpb::MemberPromoteRequest* req,
                                          etcdserverpb::MemberPromoteResponse* resp) override;
  grpc::ServerUnaryReactor* MemberUpdate(grpc::CallbackServerContext* c,
                                         const etcdserverpb::MemberUpdateRequest* req,
                                         etcdserverpb::MemberUpdateResponse* resp) override;

 private:
  Context* ctx_;
};

// The leader's part of MemberAdd, MemberRemove and MemberPromote, checks
// done: `done` once the configuration changed (with `resp` filled) or the
// change failed. Call on the leader only.
void member_add(Context* ctx, const etcdserverpb::MemberAddRequest& req, etcdserverpb::MemberAddResponse* resp,
                std::function<void(Error)> done);
void member_remove(Context* ctx, const etcdserverpb::MemberRemoveRequest& req,
                   etcdserverpb::MemberRemoveResponse* resp, std::function<void(Error)> done);
void member_promote(Context* ctx, const etcdserverpb::MemberPromoteRequest& req,
                    etcdserverpb::MemberPromoteResponse* resp, std::function<void(Error)> done);

}  // namespace etcdq::server
