// raft::Fsm (raft/fsm.h) over etcdq's applier: apply::Applier applies the
// entries; snapshots sync its database and keep a checkpoint of it
// (storage/checkpoints.h) that Peer.FetchSnapshot streams to members that
// install the snapshot. A thin adapter so that apply/ needs no include of
// raft/ (the layers point down).
//
// Thread-safety: as raft::Fsm (the consensus thread).
#pragma once

#include "apply/applier.h"
#include "raft/fsm.h"
#include "storage/checkpoints.h"

namespace etcdq::raft {

class ApplierFsm final : public Fsm {
 public:
  // `checkpoints` may be null (no member ever installs from us: tests).
  // Both must outlive this.
  ApplierFsm(apply::Applier* applier, storage::Checkpoints* checkpoints)
      : applier_(applier), checkpoints_(checkpoints) {}

  Error apply(uint64_t index, std::string_view payload, std::vector<apply::Result>* results) override {
    return applier_->apply(index, payload, results);
  }
  uint64_t applied_index() const override { return applier_->applied_index(); }
  bool restored_ahead_of(uint64_t log_last_index) const override {
    return applier_->restored_ahead_of(log_last_index);
  }
  Error take_snapshot(apply::SnapshotMeta* meta) override;
  Error restore(const Fetch& fetch, bool* damaged) override { return applier_->restore(fetch, damaged); }

 private:
  apply::Applier* applier_;
  storage::Checkpoints* checkpoints_;
};

}  // namespace etcdq::raft
