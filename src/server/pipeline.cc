#include "server/pipeline.h"

#include "apply/command_check.h"

namespace etcdq::server {

Error admit(Context& ctx, const apply::Command& cmd, Source source) {
  apply::CommandLimits limits;
  limits.max_txn_ops = ctx.limits.max_txn_ops;
  if (Error e = apply::check_command(cmd, limits, source == Source::kForwarded)) return e;
  if (Error e = check_request_size(ctx, cmd)) return e;
  if (source == Source::kForwarded) return {};
  if (Error e = check_quota(ctx, cmd)) return e;
  // Authentication and permission checks go here (the auth issue).
  return {};
}

void propose(Context& ctx, apply::Command cmd, raft::ProposalDone done) {
  if (Error e = admit(ctx, cmd, Source::kLocal)) {
    apply::Result r;
    r.error = e;
    done(std::move(r));
    return;
  }
  ctx.node->propose(std::move(cmd), std::move(done));
}

}  // namespace etcdq::server
