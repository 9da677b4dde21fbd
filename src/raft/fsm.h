// The state machine as consensus sees it: what raft::Node needs from the
// applier, and nothing else (braft's StateMachine, ClickHouse Keeper's
// KeeperStateMachine). Node calls it on its consensus thread only, in log
// order; raft/applier_fsm.h implements it with apply::Applier, and a test
// may put any deterministic state machine behind it.
//
// Thread-safety: every method is called on the consensus thread (or, for
// restore, by main() before the node starts); implementations need no lock
// of their own against Node.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "apply/applier.h"
#include "common/error.h"
#include "etcdq/command.pb.h"

namespace etcdq::raft {

class Fsm {
 public:
  using PairSink = apply::Applier::PairSink;
  // Streams a snapshot's pairs into the sink it is given.
  using Fetch = std::function<Error(const PairSink&)>;

  virtual ~Fsm() = default;

  // Applies the committed entry at `index` (framed commands, apply/entry.h)
  // and appends each command's outcome to `results`. Entries at or below
  // applied_index() are skipped. A malformed command is an outcome, not an
  // error. Errors: the state database failed; the member must stop, as
  // continuing would diverge from the log.
  virtual Error apply(uint64_t index, std::string_view payload, std::vector<apply::Result>* results) = 0;
  // The last log index whose entry is reflected in the state (0: none).
  virtual uint64_t applied_index() const = 0;
  // True when the state was restored from a snapshot above `log_last_index`
  // and nothing applied since: a log that ends below it is not damaged.
  virtual bool restored_ahead_of(uint64_t log_last_index) const = 0;

  // Before libraft takes a snapshot (and may drop entries up to it): makes
  // the state durable up to applied_index() and keeps the state at that
  // index for members that will install it. Fills the applied index and
  // revision of `meta` (not its source member). Errors: the database's; the
  // snapshot is then skipped.
  virtual Error take_snapshot(apply::SnapshotMeta* meta) = 0;
  // Replaces the whole state with a snapshot's, streamed by `fetch`, as
  // apply::Applier::restore. On error, *damaged tells whether the old state
  // was already partly replaced (the member must then stop).
  virtual Error restore(const Fetch& fetch, bool* damaged) = 0;
};

}  // namespace etcdq::raft
