// libraft's transport (raft_uv_transport) carried over gRPC on the peer URL,
// so that every byte between members goes through one listener that the TLS
// issue can put behind mutual TLS by changing credentials only (libraft's
// own TCP transport has no TLS and would need a second peer port).
//
// libraft opens one connection per member it sends to and only writes on it;
// the receiving member only reads (uv_send.c / uv_recv.c in libraft 0.15).
// Each such connection is one client-streaming RaftTransport.Stream call:
//   sender:   libraft writes into one end of a socketpair (a uv_pipe_t it
//             owns); a pump thread reads the other end and sends what one
//             read returns (all that libraft wrote meanwhile, at most
//             kFrameBytes) as one RaftFrame message;
//   receiver: a reactor writes each frame's bytes, on the gRPC thread that
//             received it, into a socketpair whose other end libraft reads
//             as an accepted stream (a thread of the stream's own waits
//             only while that socketpair is full).
// Socketpair buffers are 4 MiB, so libuv hands over a batch of entries in
// one write.
// The first frame names the sender (id and advertised peer address), as
// libraft's TCP handshake does. libraft trusts what it reads, so the
// receiver checks every message's framing first (raft/wire_check.h): the
// first malformed one ends the call (INVALID_ARGUMENT, and a warning naming
// the peer) before libraft has all of it. A broken call closes the socketpair, and
// libraft reconnects as it does after a TCP error. Messages lost that way
// are resent by Raft itself (heartbeats, append retries).
//
// Cost: one extra copy through a socketpair on each side and gRPC framing;
// measured in bench/RESULTS.md (3-member puts).
//
// Thread-safety: the raft_uv_transport callbacks run on the consensus thread
// (libraft's loop); the gRPC service runs on gRPC's threads; the connect and
// pump threads (one per outgoing stream) are the transport's own. Loop-side state is touched only on
// the loop thread; other threads hand it work through a uv_async_t
// (raft/uv_bridge.h, the libuv side shared with the tests' in-memory one).
#pragma once

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <grpcpp/grpcpp.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "etcdq/peer.grpc.pb.h"

namespace etcdq::raft {

class GrpcTransport {
 public:
  // The gRPC channel to a member's peer "host:port" (shared with the
  // forwarder, so both use the same credentials and connection).
  using ChannelFor = std::function<std::shared_ptr<grpc::Channel>(const std::string& target)>;

  GrpcTransport(uv_loop_t* loop, ChannelFor channel_for);
  ~GrpcTransport();
  GrpcTransport(const GrpcTransport&) = delete;
  GrpcTransport& operator=(const GrpcTransport&) = delete;

  // What raft_uv_init takes. Valid while this object lives; libraft must
  // have closed it (raft_close completed) before this object is destroyed.
  struct raft_uv_transport* raw();
  // The RaftTransport service, to be served on the peer URL. Calls that
  // arrive before libraft listens, or after it closed, get UNAVAILABLE.
  grpc::Service* service();

  // The most one RaftFrame carries (the peer server accepts 2 MiB and more).
  static constexpr size_t kFrameBytes = 1 << 20;
  // A peer address in a handshake longer than this is refused.
  static constexpr size_t kMaxAddressBytes = 512;
  // Incoming streams at once (libraft needs one per member that sends to
  // us): each holds two descriptors and its buffers, so more are refused
  // with RESOURCE_EXHAUSTED rather than run the member out of descriptors.
  static constexpr int kMaxIncomingStreams = 64;

 private:
  struct Shared;
  class Incoming;
  class Service;
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<Service> service_;
};

}  // namespace etcdq::raft
