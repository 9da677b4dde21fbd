#include "server/context.h"

namespace etcdq::server {

void Context::fill_header(etcdserverpb::ResponseHeader* h, bool with_revision) const {
  h->set_cluster_id(cluster_id);
  h->set_member_id(self.id);
  h->set_raft_term(node->progress().term);
  if (with_revision && h->revision() == 0) h->set_revision(store->view()->revision());
}

Error check_request_size(const Context& ctx, const apply::Command& cmd) {
  constexpr int64_t kEtcdInternalHeaderBytes = 13;
  if (static_cast<int64_t>(cmd.ByteSizeLong()) + kEtcdInternalHeaderBytes > ctx.limits.max_request_bytes) {
    return errors::request_too_large();
  }
  return {};
}

grpc::Status to_grpc(const Error& e) {
  if (e.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(e.code()), e.message());
}

}  // namespace etcdq::server
