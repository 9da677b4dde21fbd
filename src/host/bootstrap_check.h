// Start-up checks etcd makes before a member's first start (etcdserver's
// VerifyBootstrap / VerifyJoinExisting, advertiseMatchesCluster): they catch
// a cluster that would otherwise come up with a member nobody can reach.
// The host makes them before the member opens its data dir (host/host.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "host/config.h"

namespace etcdq::host {

// The peer URLs --initial-cluster gives `name` must be exactly its
// --initial-advertise-peer-urls, in any order, compared as scheme, host and
// port (cli::parse_url reads "localhost" as 127.0.0.1 everywhere, so here
// too, where etcd 3.4 refuses the pair). Checked only for a data dir that
// holds no member yet (`fresh`), as etcd checks only without a WAL.
// Errors: kInvalidArgument with etcd's message.
Error check_advertise_matches_cluster(const std::string& name,
                                      const std::vector<std::pair<std::string, Url>>& initial_cluster,
                                      const std::vector<Url>& advertise_peer_urls, bool fresh);

}  // namespace etcdq::host
