// Membership as the member's services see it (etcd's membership changes
// through EtcdServer's AddMember, RemoveMember, PromoteMember and
// MoveLeader): the configuration consensus holds, and changes to it, done
// on the leader. consensus::Node provides it (member/node_consensus.h).
//
// Thread-safety: any thread. `done` runs once, on consensus's thread once
// the change committed, or with the error that stopped it
// (errors::not_leader() off the leader, etcd's membership errors).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "consensus/node.h"

namespace etcdq::member {

class Membership {
 public:
  virtual ~Membership() = default;

  // Voters and learners in the configuration, now.
  virtual std::vector<consensus::MemberState> members() = 0;
  // A learner is added as one; a voter is caught up first (consensus/node.h).
  virtual void add_member(uint64_t id, std::string address, bool learner, std::function<void(Error)> done) = 0;
  virtual void promote_member(uint64_t id, std::function<void(Error)> done) = 0;
  virtual void remove_member(uint64_t id, std::function<void(Error)> done) = 0;
  // etcd's MoveLeader: `done` once `id` leads, or the transfer failed.
  virtual void transfer_leadership(uint64_t id, std::function<void(Error)> done) = 0;
};

}  // namespace etcdq::member
