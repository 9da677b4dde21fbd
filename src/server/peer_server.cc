#include "server/peer_server.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/server_posix.h>

#include <chrono>

#include "server/peer_service.h"
#include "server/server.h"

namespace etcdq::server {

constexpr int kPeerOverheadBytes = 2 << 20;

struct PeerServer::Services {
  explicit Services(Context* c) : peer(c) {}
  PeerService peer;
};

PeerServer::PeerServer(Context* ctx) : ctx_(ctx), services_(new Services(ctx)) {}

PeerServer::~PeerServer() { shutdown(0); }

Error PeerServer::start() {
  grpc::ServerBuilder b;
  b.SetMaxReceiveMessageSize(static_cast<int>(ctx_->limits.max_request_bytes + kPeerOverheadBytes));
  b.SetMaxSendMessageSize(INT32_MAX);
  b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
  b.RegisterService(&services_->peer);
  // No gRPC health service here, whatever the client server enabled
  // (server.cc): a peer URL serves members only.
  b.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  server_ = b.BuildAndStart();
  if (!server_) return errors::internal("cannot start the peer server");
  return {};
}

void PeerServer::adopt(int fd) {
  // gRPC owns the socket from here, as one it accepted itself.
  grpc::AddInsecureChannelFromFd(server_.get(), fd);
}

void PeerServer::shutdown(int grace_ms) {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server_->Wait();
  server_.reset();
}

}  // namespace etcdq::server
