// The Peer service (proto/etcdq/peer.proto): what other members call on
// this one. Served on the peer URL only (server/peer_server.h).
//   Propose, ReadIndex, LeaseKeepAlive: on the leader (errors::not_leader()
//     elsewhere, and the caller retries with the new leader).
//   LeaseTimeToLive, MemberAdd, MemberRemove, MemberPromote: a client's
//     call a follower checked and passed on (server/forwarded_calls.h); on
//     the leader only (errors::not_leader() elsewhere), checked again
//     with the user and auth revision the follower sent.
//   HashKV: etcd's /members/hashkv (member/corruption_check.h): the hash
//     of the key-value history up to a revision, as Maintenance.HashKV
//     computes it, from a thread of its own; asked with another cluster's
//     id: FAILED_PRECONDITION "cluster ID mismatch"; at most kMaxHashes at
//     once (more get RESOURCE_EXHAUSTED), a request over
//     kMaxHashRequestBytes or with a negative revision is refused.
//   FetchSnapshot: our state as it is at the call (member/fsm.h stream_state), streamed
//     in chunks of about 1 MiB from a thread of its own, at the pace the
//     receiver takes them; at most kMaxSnapshotSenders at once (more get
//     RESOURCE_EXHAUSTED), and a receiver that takes no chunk for 30 s is
//     cut off (CANCELLED).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "etcdq/peer.grpc.pb.h"
#include "server/context.h"

namespace etcdq::server {

class PeerService final : public peer::Peer::CallbackService {
 public:
  explicit PeerService(Context* ctx);
  // Callbacks of checks still in flight do nothing after this.
  ~PeerService() override;

  grpc::ServerUnaryReactor* Propose(grpc::CallbackServerContext* c, const peer::ProposeRequest* req,
                                    peer::ProposeResponse* resp) override;
  grpc::ServerUnaryReactor* ReadIndex(grpc::CallbackServerContext* c, const peer::ReadIndexRequest* req,
                                      peer::ReadIndexResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseKeepAlive(grpc::CallbackServerContext* c,
                                           const etcdserverpb::LeaseKeepAliveRequest* req,
                                           etcdserverpb::LeaseKeepAliveResponse* resp) override;
  grpc::ServerUnaryReactor* Removed(grpc::CallbackServerContext* c, const peer::RemovedRequest* req,
                                    peer::RemovedResponse* resp) override;
  grpc::ServerUnaryReactor* Attributes(grpc::CallbackServerContext* c, const peer::AttributesRequest* req,
                                       apply::MemberAttributes* resp) override;
  grpc::ServerUnaryReactor* Configuration(grpc::CallbackServerContext* c, const peer::ConfigurationRequest* req,
                                          peer::ConfigurationResponse* resp) override;
  grpc::ServerUnaryReactor* QueueConsumers(grpc::CallbackServerContext* c, const peer::QueueConsumersRequest* req,
                                           peer::QueueConsumersResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseTimeToLive(grpc::CallbackServerContext* c, const peer::ForwardedLeaseTimeToLive* req,
                                            etcdserverpb::LeaseTimeToLiveResponse* resp) override;
  grpc::ServerUnaryReactor* MemberAdd(grpc::CallbackServerContext* c, const peer::ForwardedMemberAdd* req,
                                      etcdserverpb::MemberAddResponse* resp) override;
  grpc::ServerUnaryReactor* MemberRemove(grpc::CallbackServerContext* c, const peer::ForwardedMemberRemove* req,
                                         etcdserverpb::MemberRemoveResponse* resp) override;
  grpc::ServerUnaryReactor* MemberPromote(grpc::CallbackServerContext* c, const peer::ForwardedMemberPromote* req,
                                          etcdserverpb::MemberPromoteResponse* resp) override;
  grpc::ServerUnaryReactor* HashKV(grpc::CallbackServerContext* c, const peer::HashKVRequest* req,
                                   peer::HashKVResponse* resp) override;
  grpc::ServerWriteReactor<peer::SnapshotChunk>* FetchSnapshot(grpc::CallbackServerContext* c,
                                                               const peer::FetchSnapshotRequest* req) override;

  // A member installs from one source at a time, so this is room for a
  // whole cluster installing at once; each transfer holds a thread.
  static constexpr int kMaxSnapshotSenders = 8;
  // Each hash is a full pass over the key space; members ask one at a
  // time (the leader every --corrupt-check-time, a starting member once).
  static constexpr int kMaxHashes = 2;
  // A real request is under 24 bytes (two varints).
  static constexpr size_t kMaxHashRequestBytes = 64;

 private:
  // Refuses a forwarded call here unless this member leads and the
  // forwarded caller still has the root role (see forwarded_calls.h);
  // true when `reactor` was finished.
  bool refuse_forwarded_admin(const peer::ForwardedAuth& a, grpc::ServerUnaryReactor* reactor) const;
  // `id` is in this member's view of the configuration.
  bool is_member(uint64_t id) const;
  // The peer host:port of member `id`, "" if unknown.
  std::string peer_address(uint64_t id) const;
  // A removal notice is acted on only once a member that leads says so:
  // every other member is asked (Configuration), and one that answers as
  // leader without this member in its configuration confirms it.
  void confirm_removal();
  Context* ctx_;
  struct Alive {
    std::mutex mu;
    bool alive = true;
  };
  std::shared_ptr<Alive> alive_ = std::make_shared<Alive>();
  std::shared_ptr<std::atomic<int>> snapshot_senders_ = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> hashes_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace etcdq::server
