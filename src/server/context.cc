#include "server/context.h"

#include <google/protobuf/io/coded_stream.h>

#include "apply/validate.h"

namespace etcdq::server {

void Context::fill_header(etcdserverpb::ResponseHeader* h, bool with_revision) const {
  h->set_cluster_id(current_cluster_id());
  h->set_member_id(self.id);
  h->set_raft_term(node->progress().term);
  if (with_revision && h->revision() == 0) h->set_revision(store->view()->revision());
}

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

uint64_t Context::current_cluster_id() const {
  uint64_t c = members != nullptr ? members->cluster_id() : 0;
  return c != 0 ? c : cluster_id;
}

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
  if (ctx.alarms->active(etcdserverpb::CORRUPT)) return errors::corrupt();
  bool adds = cmd.has_put() || cmd.has_lease_grant() || (cmd.has_txn() && !apply::txn_is_read_only(cmd.txn()));
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
  ctx.node->propose(std::move(raise), [](apply::Result&&) {});
  return errors::no_space();
}

grpc::Status to_grpc(const Error& e) {
  if (e.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(e.code()), e.message());
}

}  // namespace etcdq::server
