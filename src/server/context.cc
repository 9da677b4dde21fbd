#include "server/context.h"

namespace etcdq::server {

bool refuse_call(const Context& ctx, grpc::CallbackServerContext* call, grpc::ServerUnaryReactor* reactor,
                 bool learner_ok) {
  raft::Progress p = ctx.node->progress();
  if (p.is_learner && !learner_ok) {
    reactor->Finish(to_grpc(errors::not_supported_for_learner()));
    return true;
  }
  if (p.leader_id == 0) {
    const auto& md = call->client_metadata();
    auto it = md.find("hasleader");
    if (it != md.end() && it->second == "true") {
      reactor->Finish(to_grpc(errors::no_leader()));
      return true;
    }
  }
  return false;
}




grpc::Status to_grpc(const Error& e) {
  if (e.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(e.code()), e.message());
}

}  // namespace etcdq::server
