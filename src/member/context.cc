#include "member/context.h"

namespace etcdq::member {

void Context::fill_header(etcdserverpb::ResponseHeader* h, bool with_revision) const {
  h->set_cluster_id(current_cluster_id());
  h->set_member_id(self.id);
  h->set_raft_term(consensus->progress().term);
  if (with_revision && h->revision() == 0) h->set_revision(store->view()->revision());
}

uint64_t Context::current_cluster_id() const {
  uint64_t c = members != nullptr ? members->cluster_id() : 0;
  return c != 0 ? c : cluster_id;
}

}  // namespace etcdq::member
