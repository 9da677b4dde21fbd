#include "server/context.h"

#include <cstdlib>

#include "net/tls_pump.h"

namespace etcdq::server {

Credentials credentials_of(const grpc::ServerContextBase* call) {
  Credentials c;
  const auto& md = call->client_metadata();
  auto it = md.find("token");
  if (it == md.end()) it = md.find("authorization");
  if (it != md.end()) {
    // A bounded copy: a token is 16 letters, a dot and an index.
    c.has_token = true;
    c.token.assign(it->second.data(), std::min<size_t>(it->second.size(), 1024));
    return c;
  }
  // A connection the TLS pump handed over by its socketpair end: the pump
  // knows the certificate it verified there.
  if (int fd = socket_fd_of(call); fd >= 0) c.common_name = net::TlsPump::peer_common_name(fd);
  return c;
}

int socket_fd_of(const grpc::ServerContextBase* call) {
  std::string peer = call->peer();
  return peer.rfind("fd:", 0) == 0 ? std::atoi(peer.c_str() + 3) : -1;
}

Error caller_of(const Context& ctx, const Credentials& cred, member::Caller* out) {
  *out = {};
  if (!member::auth_enabled(ctx)) return {};
  if (cred.has_token) return member::caller_of_token(ctx, cred.token, out);
  if (!cred.common_name.empty()) return member::caller_of_cert_common_name(ctx, cred.common_name, out);
  return {};
}

Error caller_of(const Context& ctx, const grpc::ServerContextBase* call, member::Caller* out) {
  *out = {};
  if (!member::auth_enabled(ctx)) return {};
  return caller_of(ctx, credentials_of(call), out);
}

bool stamp_caller(const Context* ctx, const grpc::ServerContextBase* call, grpc::ServerUnaryReactor* reactor,
                  apply::Command* cmd) {
  member::Caller who;
  if (Error e = caller_of(*ctx, call, &who)) {
    reactor->Finish(to_grpc(e));
    return false;
  }
  member::stamp(cmd, who);
  return true;
}

Error check_read_write(const Context* ctx, const grpc::ServerContextBase* call, std::string_view key,
                       std::string_view range_end) {
  return check_caller(ctx, call, [&](const member::Caller& who) -> Error {
    return member::check_read_write(*ctx, who, key, range_end);
  });
}

grpc::Status to_grpc(const Error& e) {
  if (e.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(e.code()), e.message());
}

}  // namespace etcdq::server
