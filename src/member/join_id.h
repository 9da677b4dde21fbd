// The id of a member that joins a running cluster (--initial-cluster-state
// existing) on a new data dir. MemberAdd made that id from the time
// (member/identity.h runtime_member_id), so the new member cannot derive
// it from its flags: it asks the members it was told about, as etcd does
// (server/etcdserver/bootstrap.go GetClusterFromRemotePeers, then
// membership ValidateClusterAndAssignIDs matching members by peer URL).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace etcdq::member {

// Asks each of `peer_addresses` (host:port of the other members of
// --initial-cluster) for its configuration (Peer.Configuration, 2 s each,
// one round after another until `rounds` ran out or `stop` says so) and
// gives the id of the member listed at `self_address`. A member that
// answers without addresses (an etcdq from before runtime ids) lists
// members by the derived ids: then *id = `derived`.
// Blocks the calling thread. Errors (Internal, nothing changed):
//   no member answered: etcd's "cannot fetch cluster info from peer urls:
//     could not retrieve cluster information from the given URLs";
//   members answered but none lists `self_address`: says so (add the
//     member with MemberAdd first).
Error learn_joining_id(const std::vector<std::string>& peer_addresses, const std::string& self_address,
                       uint64_t derived, int rounds, const std::function<bool()>& stop, uint64_t* id);

}  // namespace etcdq::member
