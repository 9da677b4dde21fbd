#include "server/call_rules.h"

namespace etcdq::server {

MemberRole role_of(const Context& ctx) {
  auto p = ctx.consensus->progress();
  return MemberRole{p.is_learner, p.leader_id != 0};
}

Error call_refusal(const MemberRole& role, const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                   bool learner_ok) {
  if (role.learner && !learner_ok) return errors::not_supported_for_learner();
  if (!role.has_leader) {
    // etcd reads the first value only (md[key][0]).
    auto it = metadata.find("hasleader");
    if (it != metadata.end() && it->second == "true") return errors::no_leader();
  }
  return {};
}

Error call_refusal(const Context& ctx, const grpc::ServerContextBase* call, bool learner_ok) {
  return call_refusal(role_of(ctx), call->client_metadata(), learner_ok);
}

}  // namespace etcdq::server
