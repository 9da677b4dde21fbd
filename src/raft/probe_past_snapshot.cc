#include "raft/probe_past_snapshot.h"

namespace {
// libraft 0.15's progress state for "sending a snapshot" (src/progress.h).
constexpr unsigned short kProgressSnapshot = 2;
}  // namespace

extern "C" void __wrap_progressToProbe(struct raft* r, unsigned i) {
  struct raft_progress* p = &r->leader_state.progress[i];
  const bool was_snapshot = p->state == kProgressSnapshot;
  const raft_index snapshot_index = p->snapshot_index;  // the original clears it
  __real_progressToProbe(r, i);
  if (was_snapshot && p->next_index < snapshot_index + 1) {
    p->next_index = snapshot_index + 1;
  }
}
