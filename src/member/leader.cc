#include "member/leader.h"

#include <string>

#include "consensus/forwarder.h"

namespace etcdq::member::leader {

Error route(Context& ctx, Route* out) {
  std::string target = ctx.node->leader_target();
  if (target.empty()) return errors::no_leader();
  out->channel = ctx.node->forwarder().channel(target);
  out->timeout = std::chrono::milliseconds(ctx.node->options().request_timeout_ms());
  return {};
}

Error from_status(const grpc::Status& s) { return consensus::Forwarder::from_status(s); }

}  // namespace etcdq::member::leader
