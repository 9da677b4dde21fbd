// consensus::Fsm (consensus/fsm.h) over etcdq's applier, and the one place where a
// command becomes the bytes consensus carries and an applied command's
// result comes back to its proposer. Consensus moves bytes only; the
// meaning of a command (proto/etcdq/command.proto) is apply/'s, and this
// adapter is all that joins the two, so that neither includes the other.
//
// Apply: apply::Applier applies the entry and gives each command's
// apply::Result, which goes back to its proposer inside a CommandOutcome.
// Snapshots sync the applier's database and keep a checkpoint of it
// (storage/checkpoints.h) that Peer.FetchSnapshot streams to members that
// install the snapshot.
//
// Thread-safety: ApplierFsm as consensus::Fsm (the consensus thread);
// propose_command() from any thread.
#pragma once

#include <functional>

#include "apply/applier.h"
#include "etcdq/command.pb.h"
#include "consensus/fsm.h"
#include "consensus/node.h"
#include "storage/checkpoints.h"

namespace etcdq::member {

// What one applied command answers its proposer.
struct CommandOutcome final : consensus::Outcome {
  apply::Result result;
};

class ApplierFsm final : public consensus::Fsm {
 public:
  // `checkpoints` may be null (no member ever installs from us: tests).
  // Both must outlive this.
  ApplierFsm(apply::Applier* applier, storage::Checkpoints* checkpoints)
      : applier_(applier), checkpoints_(checkpoints) {}

  Error apply(uint64_t index, std::string_view entry, std::vector<consensus::Applied>* applied) override;
  uint64_t applied_index() const override { return applier_->applied_index(); }
  bool restored_ahead_of(uint64_t log_last_index) const override {
    return applier_->restored_ahead_of(log_last_index);
  }
  Error take_snapshot(consensus::SnapshotPoint* at) override;
  Error make_durable() override { return applier_->make_durable(); }
  // The pairs' spaces are storage::Cf; any other number fails the restore
  // (errors::internal "bad column family in a snapshot").
  Error restore(const Fetch& fetch, bool* damaged) override;

 private:
  apply::Applier* applier_;
  storage::Checkpoints* checkpoints_;
};

// How a command proposal ends: the apply::Result its apply gave, or one
// whose error is consensus's (errors::stopped(), not_leader(),
// leader_changed(), timeout()) when it never applied here.
using CommandDone = std::function<void(apply::Result&&)>;

// Encodes `cmd` with the tag consensus gives it (its origin and proposal
// id, and this member's clock as its time unless set) and proposes it, as
// consensus::Node::propose says. No check: member/pipeline.h admits commands
// first.
void propose_command(consensus::Node& node, apply::Command cmd, CommandDone done);

}  // namespace etcdq::member
