#include "server/peer_server.h"

#include <chrono>

#include "server/peer_service.h"

namespace etcdq::server {

constexpr int kPeerOverheadBytes = 2 << 20;

struct PeerServer::Services {
  explicit Services(Context* c) : peer(c) {}
  PeerService peer;
};

PeerServer::PeerServer(Context* ctx, grpc::Service* raft_transport)
    : ctx_(ctx), raft_transport_(raft_transport), services_(new Services(ctx)) {}

PeerServer::~PeerServer() { shutdown(0); }

Error PeerServer::start(const std::vector<std::string>& listen) {
  grpc::ServerBuilder b;
  std::vector<int> ports(listen.size(), 0);
  for (size_t i = 0; i < listen.size(); ++i) {
    b.AddListeningPort(listen[i], grpc::InsecureServerCredentials(), &ports[i]);
  }
  b.SetMaxReceiveMessageSize(static_cast<int>(ctx_->limits.max_request_bytes + kPeerOverheadBytes));
  b.SetMaxSendMessageSize(INT32_MAX);
  b.RegisterService(&services_->peer);
  b.RegisterService(raft_transport_);
  server_ = b.BuildAndStart();
  if (!server_) return errors::internal("cannot start the peer server on " + (listen.empty() ? "" : listen[0]));
  for (size_t i = 0; i < listen.size(); ++i) {
    if (ports[i] == 0) return errors::internal("cannot listen for peers on " + listen[i]);
  }
  return {};
}

void PeerServer::shutdown(int grace_ms) {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server_->Wait();
  server_.reset();
}

}  // namespace etcdq::server
