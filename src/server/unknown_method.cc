#include "server/unknown_method.h"

namespace etcdq::server {
namespace {

class Refuse final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refuse(const std::string& message) { Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, message)); }
  void OnDone() override { delete this; }
};

}  // namespace

std::string UnknownMethodService::message(const std::string& path) const {
  // grpc-go's handleStream: "/service/method"; a path without a second
  // slash names no method.
  std::string p = path.empty() || path[0] != '/' ? path : path.substr(1);
  auto slash = p.rfind('/');
  if (slash == std::string::npos) return "malformed method name: \"" + path + "\"";
  std::string service = p.substr(0, slash), method = p.substr(slash + 1);
  if (services_.count(service)) return "unknown method " + method + " for service " + service;
  return "unknown service " + service;
}

grpc::ServerGenericBidiReactor* UnknownMethodService::CreateReactor(grpc::GenericCallbackServerContext* ctx) {
  return new Refuse(message(ctx->method()));
}

}  // namespace etcdq::server
