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
#include <utility>
#include <vector>

#include "common/error.h"

namespace etcdq::consensus {
class Forwarder;
}

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

// Whether the cluster's leader says member `self` is no longer one of its
// members: asks each of `others` (id, peer host:port: the members this
// member's own Raft configuration lists) for its configuration
// (Peer.Configuration, 1 s each) and believes only a member that names
// itself the leader. A member removed while it was down restarts on a log
// whose configuration still holds it, and the others drop its messages:
// etcd's peers answer it "the member has been permanently removed from the
// cluster" and it exits (etcdserver ErrMemberRemoved); this tells it so.
// Blocks the calling thread; false when no leader answered.
// Calls through `forwarder`, which must outlive the process's calls (the
// node's).
bool removed_by_cluster(consensus::Forwarder& forwarder, const std::vector<std::pair<uint64_t, std::string>>& others,
                        uint64_t self);

}  // namespace etcdq::member
