// The Peer service (proto/etcdq/peer.proto): what other members call on
// this one. Served on the client URL, next to etcd's services.
//   Propose, ReadIndex, LeaseKeepAlive: on the leader (errors::not_leader()
//     elsewhere, and the caller retries with the new leader).
//   FetchSnapshot: the checkpoint taken with one of our snapshots, streamed
//     in chunks of about 1 MiB from a thread of its own, at the pace the
//     receiver takes them.
#pragma once

#include <grpcpp/grpcpp.h>

#include "etcdq/peer.grpc.pb.h"
#include "server/context.h"

namespace etcdq::server {

class PeerService final : public peer::Peer::CallbackService {
 public:
  explicit PeerService(Context* ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Propose(grpc::CallbackServerContext* c, const peer::ProposeRequest* req,
                                    peer::ProposeResponse* resp) override;
  grpc::ServerUnaryReactor* ReadIndex(grpc::CallbackServerContext* c, const peer::ReadIndexRequest* req,
                                      peer::ReadIndexResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseKeepAlive(grpc::CallbackServerContext* c,
                                           const etcdserverpb::LeaseKeepAliveRequest* req,
                                           etcdserverpb::LeaseKeepAliveResponse* resp) override;
  grpc::ServerUnaryReactor* Removed(grpc::CallbackServerContext* c, const peer::RemovedRequest* req,
                                    peer::RemovedResponse* resp) override;
  grpc::ServerUnaryReactor* QueueConsumers(grpc::CallbackServerContext* c, const peer::QueueConsumersRequest* req,
                                           peer::QueueConsumersResponse* resp) override;
  grpc::ServerWriteReactor<peer::SnapshotChunk>* FetchSnapshot(grpc::CallbackServerContext* c,
                                                               const peer::FetchSnapshotRequest* req) override;

 private:
  Context* ctx_;
};

}  // namespace etcdq::server
