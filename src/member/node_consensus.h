// member/consensus.h and member/membership.h over the member's consensus::Node.
//
// Thread-safety: as consensus::Node's (any thread).
#pragma once

#include "member/consensus.h"
#include "member/membership.h"
#include "consensus/node.h"

namespace etcdq::member {

class NodeConsensus final : public Consensus, public Membership {
 public:
  // `node` must outlive this.
  explicit NodeConsensus(consensus::Node* node) : node_(node) {}

  void propose(apply::Command cmd, CommandDone done) override { propose_command(*node_, std::move(cmd), std::move(done)); }
  void read_barrier(std::function<void(Error)> fn) override { node_->read_barrier(std::move(fn)); }
  consensus::Progress progress() override { return node_->progress(); }

  std::vector<consensus::MemberState> members() override { return node_->members(); }
  void add_member(uint64_t id, std::string address, bool learner, std::function<void(Error)> done) override {
    node_->add_member(id, std::move(address), learner, std::move(done));
  }
  void promote_member(uint64_t id, std::function<void(Error)> done) override {
    node_->promote_member(id, std::move(done));
  }
  void remove_member(uint64_t id, std::function<void(Error)> done) override {
    node_->remove_member(id, std::move(done));
  }
  void transfer_leadership(uint64_t id, std::function<void(Error)> done) override {
    node_->transfer_leadership(id, std::move(done));
  }

 private:
  consensus::Node* node_;
};

}  // namespace etcdq::member
