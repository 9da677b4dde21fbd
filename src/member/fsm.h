// consensus::Fsm (consensus/fsm.h) over etcdq's applier, and the one place where a
// command becomes the bytes consensus carries and an applied command's
// result comes back to its proposer. Consensus moves bytes only; the
// meaning of a command (proto/etcdq/command.proto) is apply/'s, and this
// adapter is all that joins the two, so that neither includes the other.
//
// Apply: apply::Applier applies the entry and gives each command's
// apply::Result, which goes back to its proposer inside a CommandOutcome.
// Snapshots sync the applier's database; a member that installs one streams
// the state as it is when it asks (stream_state, Peer.FetchSnapshot), at
// the snapshot's index or later, as etcd sends its whole database as it is
// when the snapshot goes out (server.go, createMergedSnapshotMessage).
//
// Thread-safety: ApplierFsm as consensus::Fsm (the consensus thread);
// propose_command() and stream_state() from any thread.
#pragma once

#include <functional>

#include "apply/applier.h"
#include "etcdq/command.pb.h"
#include "consensus/fsm.h"
#include "consensus/node.h"
#include "storage/engine.h"

namespace etcdq::member {

// What one applied command answers its proposer.
struct CommandOutcome final : consensus::Outcome {
  apply::Result result;
};

class ApplierFsm final : public consensus::Fsm {
 public:
  // `applier` must outlive this.
  explicit ApplierFsm(apply::Applier* applier) : applier_(applier) {}

  Error apply(uint64_t index, std::string_view entry, std::vector<consensus::Applied>* applied) override;
  uint64_t applied_index() const override { return applier_->applied_index(); }
  bool restored_ahead_of(uint64_t log_last_index) const override {
    return applier_->restored_ahead_of(log_last_index);
  }
  uint64_t log_floor() const override { return applier_->log_floor(); }
  Error take_snapshot(consensus::SnapshotPoint* at) override;
  Error make_durable() override { return applier_->make_durable(); }
  // The pairs' spaces are storage::Cf; any other number fails the stage
  // (errors::internal "bad column family in a snapshot").
  Error stage(const Fetch& fetch, std::unique_ptr<Staged>* out) override;
  // `staged` must come from this Fsm's stage.
  Error restore_staged(Staged& staged, bool* damaged) override;

 private:
  apply::Applier* applier_;
};

// Peer.FetchSnapshot's source: every (column family, key, value) of
// `engine`'s state as it is now (one RocksDB snapshot), in column family
// then key order, or with StateParts::kAllButLatest all but latest's (the
// installer rebuilds it: mvcc/derive.h); stops at the first error `fn` returns and returns it.
// Each applied entry is one atomic write, so the view is the state at some
// applied index; its own applied_index pair goes with it. The state
// holds committed entries only, so any index at or past a Raft snapshot's
// serves its installer (entries up to it are skipped when replayed).
// Errors: errors::internal when the state is at an applied index below
// `min_index` (this member lags: the installer asks another).
// Thread-safe: reads a snapshot, never blocks the writers.
using StateVisitor = std::function<Error(storage::Cf cf, std::string_view key, std::string_view value)>;
enum class StateParts { kAll, kAllButLatest };
Error stream_state(const storage::Engine* engine, uint64_t min_index, const StateVisitor& fn,
                   StateParts parts = StateParts::kAll);

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
