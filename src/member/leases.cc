#include "member/leases.h"

#include <chrono>
#include <string>
#include <utility>

#include "consensus/forwarder.h"
#include "mvcc/range.h"

namespace etcdq::member::leases {

int64_t next_id(Context& ctx) {
  for (;;) {
    int64_t id = ctx.lease_ids->next();
    if (!ctx.lessor->exists(id)) return id;
  }
}

int64_t renew(Context& ctx, int64_t id) { return ctx.lessor->renew(id); }

void renew_at_leader(Context& ctx, int64_t id, std::function<void(Error, int64_t ttl)> done) {
  std::string target = ctx.node->leader_target();
  if (target.empty()) return done(errors::no_leader(), 0);
  ctx.node->forwarder().lease_keep_alive(target, id,
                                         std::chrono::milliseconds(ctx.node->options().request_timeout_ms()),
                                         std::move(done));
}

std::vector<int64_t> ids(const Context& ctx) { return ctx.lessor->ids(); }

void time_to_live(const Context& ctx, const etcdserverpb::LeaseTimeToLiveRequest& req,
                  etcdserverpb::LeaseTimeToLiveResponse* resp) {
  resp->set_id(req.id());
  auto info = ctx.lessor->info(req.id());
  if (!info) {
    resp->set_ttl(-1);  // etcd answers an unknown lease with TTL -1, not an error
  } else {
    resp->set_ttl(info->remaining_seconds);
    resp->set_grantedttl(info->granted_ttl);
    if (req.keys()) {
      auto view = ctx.store->view();
      for (auto& k : mvcc::keys_of_lease(*view, req.id())) resp->add_keys(std::move(k));
    }
  }
  ctx.fill_header(resp->mutable_header());
}

}  // namespace etcdq::member::leases
