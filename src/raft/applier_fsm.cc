#include "raft/applier_fsm.h"

namespace etcdq::raft {

Error ApplierFsm::take_snapshot(apply::SnapshotMeta* meta) {
  // libraft may drop log entries up to here once the snapshot is stored:
  // the state database must be durable up to the applied index first.
  if (Error e = applier_->make_durable()) return e;
  if (checkpoints_ != nullptr) {
    if (Error e = checkpoints_->take(applier_->engine(), applier_->applied_index())) return e;
  }
  meta->set_applied_index(applier_->applied_index());
  meta->set_revision(applier_->revision());
  return {};
}

}  // namespace etcdq::raft
