// What a client URL answers for a method it does not serve — among them
// every member-only call (server/peer_server.h) — exactly as etcd's gRPC
// server (grpc-go) does: UNIMPLEMENTED with "unknown service S" or, for a
// service it has, "unknown method M for service S". gRPC C++ alone answers
// UNIMPLEMENTED with an empty message.
//
// Thread-safety: gRPC's threads; immutable after construction.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <set>
#include <string>

namespace etcdq::server {

class UnknownMethodService final : public grpc::CallbackGenericService {
 public:
  // `services`: the full names of the services this server has
  // ("etcdserverpb.KV", ...).
  explicit UnknownMethodService(std::set<std::string> services) : services_(std::move(services)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

  // The message for a call of `path` ("/service/method").
  std::string message(const std::string& path) const;

 private:
  std::set<std::string> services_;
};

}  // namespace etcdq::server
