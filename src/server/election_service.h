// etcd's Election service (v3electionpb; etcd's api/v3election), with
// clientv3's Election recipe run in-process. A candidate's key is
// `name/<lease hex>`; the leader is the key with the lowest create revision
// under `name/`.
// - Campaign waits until the caller leads; Proclaim changes the leader's
//   value (fails "election: not leader" if the key is not its own any more);
//   Leader answers the current leader's key-value ("election: no leader");
//   Observe streams the leader's key-value at each change; Resign deletes
//   the caller's key if it still leads.
// Error codes are etcd's: these errors are plain ones there, so Unknown.
// Like every client service, its calls (Observe too) pass etcd's
// interceptor rules first (server/call_rules.h: learner, "hasleader").
#pragma once

#include "etcd/api/v3election/v3election.grpc.pb.h"
#include "server/local_client.h"
#include "server/ruled_service.h"

namespace etcdq::server {

class ElectionService final : public RuledService<v3electionpb::Election> {
 public:
  explicit ElectionService(LocalClient* client) : RuledService(client->context()), client_(client) {
    unary("Campaign", &ElectionService::Campaign, {});
    unary("Proclaim", &ElectionService::Proclaim, {});
    unary("Leader", &ElectionService::Leader, {});
    unary("Resign", &ElectionService::Resign, {});
    server_stream("Observe", &ElectionService::Observe);
  }

  grpc::ServerUnaryReactor* Campaign(grpc::CallbackServerContext* c, const v3electionpb::CampaignRequest* req,
                                     v3electionpb::CampaignResponse* resp) override;
  grpc::ServerUnaryReactor* Proclaim(grpc::CallbackServerContext* c, const v3electionpb::ProclaimRequest* req,
                                     v3electionpb::ProclaimResponse* resp) override;
  grpc::ServerUnaryReactor* Leader(grpc::CallbackServerContext* c, const v3electionpb::LeaderRequest* req,
                                   v3electionpb::LeaderResponse* resp) override;
  grpc::ServerWriteReactor<v3electionpb::LeaderResponse>* Observe(grpc::CallbackServerContext* c,
                                                                 const v3electionpb::LeaderRequest* req) override;
  grpc::ServerUnaryReactor* Resign(grpc::CallbackServerContext* c, const v3electionpb::ResignRequest* req,
                                   v3electionpb::ResignResponse* resp) override;

 private:
  LocalClient* client_;
};

}  // namespace etcdq::server
