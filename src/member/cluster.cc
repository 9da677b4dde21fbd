#include "member/cluster.h"

#include <algorithm>
#include <string>
#include <vector>

namespace etcdq::member {
namespace {

// libraft knows a member by host:port; every member's peer URLs have this
// member's scheme (the flags refuse a mix: https:// with peer TLS).
std::string cluster_peer_url_of(const Context& ctx, const consensus::MemberState& m) {
  bool tls = !ctx.self.peer_urls.empty() && ctx.self.peer_urls.front().rfind("https://", 0) == 0;
  return (tls ? "https://" : "http://") + m.address;
}

}  // namespace

void list_members(const Context& ctx, google::protobuf::RepeatedPtrField<etcdserverpb::Member>* out) {
  std::vector<consensus::MemberState> members = ctx.membership->members();
  std::sort(members.begin(), members.end(),
            [](const consensus::MemberState& a, const consensus::MemberState& b) { return a.id < b.id; });
  for (const auto& m : members) {
    auto* o = out->Add();
    o->set_id(m.id);
    o->add_peerurls(cluster_peer_url_of(ctx, m));
    o->set_islearner(m.learner);
    if (auto a = ctx.members->get(m.id)) {
      o->set_name(a->name());
      for (const auto& u : a->client_urls()) o->add_clienturls(u);
    }
  }
}

}  // namespace etcdq::member
