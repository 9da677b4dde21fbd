#include "member/pipeline.h"

#include <google/protobuf/io/coded_stream.h>

#include "apply/command_check.h"
#include "apply/validate.h"
#include "member/auth.h"

namespace etcdq::member {

Error check_request_size(const Context& ctx, const apply::Command& cmd) {
  constexpr int64_t kEtcdInternalHeaderBytes = 13;
  // Only the request counts: a forwarded command carries its proposer's
  // origin, proposal id and clock, which a local one gets after this check.
  auto field = [](uint64_t v) -> int64_t {
    return v == 0 ? 0 : 1 + static_cast<int64_t>(google::protobuf::io::CodedOutputStream::VarintSize64(v));
  };
  int64_t bytes = static_cast<int64_t>(cmd.ByteSizeLong()) - field(cmd.origin()) - field(cmd.proposal_id()) -
                  field(static_cast<uint64_t>(cmd.time_ms()));
  if (bytes + kEtcdInternalHeaderBytes > ctx.limits.max_request_bytes) {
    return errors::request_too_large();
  }
  return {};
}

Error check_quota(Context& ctx, const apply::Command& cmd) {
  // Alarms are how an operator clears a CORRUPT or NOSPACE alarm: never refused here.
  if (cmd.has_alarm() || cmd.has_member_attributes()) return {};
  // What the apply chain's corrupt layer would refuse anyway, spared the log.
  if (ctx.alarms->active(etcdserverpb::CORRUPT)) return errors::corrupt();
  // etcd's quota cost: only Puts, LeaseGrants and Txns with a Put add data.
  bool adds = cmd.has_put() || cmd.has_lease_grant() || (cmd.has_txn() && apply::txn_has_put(cmd.txn()));
  if (!adds) return {};
  if (ctx.alarms->active(etcdserverpb::NOSPACE)) return errors::no_space();
  if (ctx.limits.quota_bytes <= 0) return {};
  if (ctx.store->engine()->size_bytes() + static_cast<int64_t>(cmd.ByteSizeLong()) <= ctx.limits.quota_bytes) {
    return {};
  }
  apply::Command raise;
  raise.mutable_alarm()->set_action(etcdserverpb::AlarmRequest::ACTIVATE);
  raise.mutable_alarm()->set_memberid(ctx.self.id);
  raise.mutable_alarm()->set_alarm(etcdserverpb::NOSPACE);
  raise.set_internal(true);
  ctx.consensus->propose(std::move(raise), [](apply::Result&&) {});
  return errors::no_space();
}


Error admit(Context& ctx, const apply::Command& cmd, Source source) {
  apply::CommandLimits limits;
  limits.max_txn_ops = ctx.limits.max_txn_ops;
  if (Error e = apply::check_command(cmd, limits, source == Source::kForwarded)) return e;
  if (Error e = check_request_size(ctx, cmd)) return e;
  if (source == Source::kForwarded) return {};
  if (Error e = check_quota(ctx, cmd)) return e;
  // The caller's permission, at the auth revision its token gave
  // (member/auth.h); the apply chain's auth layer checks it again.
  return check_permission(ctx, cmd);
}

void propose(Context& ctx, apply::Command cmd, CommandDone done) {
  if (Error e = admit(ctx, cmd, Source::kLocal)) {
    apply::Result r;
    r.error = e;
    done(std::move(r));
    return;
  }
  ctx.consensus->propose(std::move(cmd), std::move(done));
}

}  // namespace etcdq::member
