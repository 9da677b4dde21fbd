#include "host/bootstrap_check.h"

#include <algorithm>

namespace etcdq::host {
namespace {

std::string normal(const Url& u) { return u.scheme + "://" + u.host + ":" + std::to_string(u.port); }

std::string joined(const std::vector<Url>& urls, bool normalized) {
  std::vector<std::string> v;
  for (const auto& u : urls) v.push_back(normalized ? normal(u) : u.text);
  std::sort(v.begin(), v.end());
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

Error check_advertise_matches_cluster(const std::string& name,
                                      const std::vector<std::pair<std::string, Url>>& initial_cluster,
                                      const std::vector<Url>& advertise_peer_urls, bool fresh) {
  if (!fresh) return {};
  std::vector<Url> listed;
  for (const auto& [n, u] : initial_cluster) {
    if (n == name) listed.push_back(u);
  }
  if (listed.empty()) return {};  // member::Member::open names a missing local name, as etcd
  if (joined(listed, true) == joined(advertise_peer_urls, true)) return {};
  // etcdmain's message, with netutil's "resolved urls" detail.
  return {Code::kInvalidArgument, "--initial-cluster has " + name + "=" + joined(listed, false) +
                                      " but missing from --initial-advertise-peer-urls=" +
                                      joined(advertise_peer_urls, false) + " (resolved urls: \"" +
                                      joined(advertise_peer_urls, true) + "\" != \"" + joined(listed, true) + "\")"};
}

}  // namespace etcdq::host
