// The member table as etcd's Cluster service and snapshots show it
// (etcd's RaftCluster.Members, membership/cluster.go): the configuration
// consensus holds (member/membership.h: ids, peer addresses, voter or
// learner) joined with the names and client URLs members publish
// (apply/members.h).
//
// Thread-safety: any thread.
#pragma once

#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "member/context.h"

namespace etcdq::member {

// Every member, sorted by id as etcd's MembersByID (`etcdctl member list`
// prints them in that order and scripts take the first line or diff the
// output). Peer URLs carry this member's scheme (the flags refuse a mix).
void list_members(const Context& ctx, google::protobuf::RepeatedPtrField<etcdserverpb::Member>* out);

}  // namespace etcdq::member
