// member/consensus.h over the member's consensus::Node.
//
// Thread-safety: as consensus::Node's (any thread).
#pragma once

#include "member/consensus.h"
#include "consensus/node.h"

namespace etcdq::member {

class NodeConsensus final : public Consensus {
 public:
  // `node` must outlive this.
  explicit NodeConsensus(consensus::Node* node) : node_(node) {}

  void propose(apply::Command cmd, CommandDone done) override { propose_command(*node_, std::move(cmd), std::move(done)); }
  void read_barrier(std::function<void(Error)> fn) override { node_->read_barrier(std::move(fn)); }
  consensus::Progress progress() override { return node_->progress(); }

 private:
  consensus::Node* node_;
};

}  // namespace etcdq::member
