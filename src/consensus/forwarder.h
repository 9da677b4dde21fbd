// Calls from one member to another over the Peer service (proto/etcdq/
// peer.proto), which members serve on their peer URL only: proposals and
// lease keep-alives forwarded to the leader, read indexes, and snapshot
// state. One gRPC channel per target, kept for the process's life.
//
// Errors come back as etcd's: a status the remote member sent is passed
// on as is; a call that never reached it (the leader died, the network
// failed) is errors::leader_changed(), and one that ran out of time is
// errors::timeout().
//
// Thread-safety: every method may be called from any thread; callbacks run
// on gRPC's threads.
//
// consensus::Node makes its calls through the virtual methods (propose,
// read_index, removed, fetch_snapshot), so an in-process test can route them
// to other nodes without a network (NodeOptions::forwarder). An override
// keeps the contract stated here: the same errors; its callbacks may run on
// any thread, the caller's included, so Node never calls it under a lock.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "etcdq/peer.grpc.pb.h"

namespace etcdq::consensus {

// "http://host:port[/...]" -> "host:port"; "" if it is not such a URL.
std::string url_to_target(const std::string& url);

class Forwarder {
 public:
  using Timeout = std::chrono::milliseconds;

  virtual ~Forwarder() = default;

  // `done` gets errors::not_leader() when the commands were surely not
  // proposed (the target refused as a non-leader, or was never reached).
  virtual void propose(const std::string& target, std::vector<std::string> commands, Timeout timeout,
                       std::function<void(Error)> done);
  virtual void read_index(const std::string& target, Timeout timeout,
                          std::function<void(Error, uint64_t index)> done);
  void lease_keep_alive(const std::string& target, int64_t id, Timeout timeout,
                        std::function<void(Error, int64_t ttl)> done);
  // Fire and forget: tells `target` that member `id` (itself) was removed.
  virtual void removed(const std::string& target, uint64_t id);
  // Asks the member at `target` for the attributes it publishes.
  void attributes(const std::string& target, Timeout timeout,
                  std::function<void(Error, const apply::MemberAttributes&)> done);
  // Asks `target` whom it follows and which members it lists; `done` gets
  // the answer or the call's error.
  void configuration(const std::string& target, Timeout timeout,
                     std::function<void(Error, const peer::ConfigurationResponse&)> done);
  // Asks `target` for the hash of its key-value history up to `revision`
  // (Peer.HashKV; member/corruption_check.h checks the answer). `done`
  // gets the call's error (the target's own, e.g. etcd's compacted or
  // future revision, passed on as is) or the answer.
  void hash_kv(const std::string& target, int64_t revision, uint64_t cluster_id, Timeout timeout,
               std::function<void(Error, const peer::HashKVResponse&)> done);
  // Fire and forget: a key-space plug-in's report to `target`
  // (keyspace/kind.h, MemberServices::report), over the peer RPC of its
  // message type (Peer.QueueConsumers for a QueueConsumersRequest); a type
  // without one is dropped.
  void report(const std::string& target, const google::protobuf::Message& report);
  // Blocks until the whole state at `index` or later arrived (`fn` called
  // for each chunk in order), `fn` fails, or the transfer fails: also when
  // no chunk came for kInactivityLimit, or when the chunks that came over
  // a window of at least kProgressWindow carry less than kProgressFloor
  // bytes a second (errors::internal with both figures; the caller tries
  // another member).
  virtual Error fetch_snapshot(const std::string& target, uint64_t index,
                               const std::function<Error(const peer::SnapshotChunk&)>& fn);

  // The channel to a member's peer host:port (the Peer service). Every
  // member-to-member gRPC connection is made here (libraft's own in
  // consensus/transport.h): with peer TLS, over set_peer_credentials()'s.
  std::shared_ptr<grpc::Channel> channel(const std::string& target);

  // Peer TLS: the credentials of every channel() made from now on, in
  // every Forwarder (null: plaintext). Set once at start, before any call.
  static void set_peer_credentials(std::shared_ptr<grpc::ChannelCredentials> creds);

  static constexpr std::chrono::seconds kInactivityLimit{5};
  // A transfer is judged at each chunk once kProgressWindow has passed
  // since the last judgement: the bytes of the chunks since then (the
  // new one's included) must reach kProgressFloor a second over that time.
  //
  // Why a rate over a window, not a bound on the total or on the whole
  // transfer's time: the pairs come uncompressed, so no size derived from
  // the quota or the sender's database bounds a real state, and a
  // deadline that grows with the bytes received lets a fast start buy a
  // long trickle afterwards. A window judged afresh each time cuts a
  // trickle within seconds whenever it starts (issue #36: a peer sending a
  // valid pair every 0.5 s and never the last chunk held an installer for
  // good). It refuses no real sender: its
  // chunks carry 1 MiB of pairs (server/peer_service.cc), each within
  // kInactivityLimit of the one before or the transfer is cut already,
  // i.e. 200 KiB/s at least, twice the floor. etcd's receiver has no such
  // floor (rafthttp's snapshotHandler reads the body with a 5 s deadline
  // a read, --raft-read-timeout), but it takes a snapshot from its leader
  // only.
  static constexpr std::chrono::seconds kProgressWindow{2};
  static constexpr uint64_t kProgressFloor = 100 << 10;

  static Error from_status(const grpc::Status& s);
  // True when the call surely never reached the target (it could not be
  // connected to), so resending it cannot apply it twice.
  static bool never_sent(const grpc::Status& s);

 private:
  std::mutex mu_;
  std::shared_ptr<grpc::Channel> make_channel(const std::string& target);
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;  // peer targets
};

}  // namespace etcdq::consensus
