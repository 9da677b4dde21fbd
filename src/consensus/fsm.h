// The state machine as consensus sees it: bytes in log order, snapshots as
// a stream of pairs, and nothing else (braft's StateMachine, ClickHouse
// Keeper's KeeperStateMachine). Consensus never opens a command: what an
// entry's bytes mean, and what applying them answers, is the Fsm's
// (member/fsm.h implements it with apply::Applier; a test may put any
// deterministic state machine behind it).
//
// Thread-safety: every method but stage is called on the consensus thread
// (or, for restore, by main() before the node starts); implementations need
// no lock of their own against Node.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace etcdq::consensus {

// What applying one command gave the member that proposed it. Consensus
// carries it unopened from Fsm::apply to that proposal's ProposalDone
// (consensus/node.h), as braft hands a task's Closure back to its state machine:
// the Fsm derives its own type from this one.
class Outcome {
 public:
  virtual ~Outcome() = default;
};

// One applied command's outcome, with the tag its proposer gave it
// (Node::propose): the proposing node's origin and its proposal id.
struct Applied {
  uint64_t origin = 0;
  uint64_t proposal_id = 0;
  std::unique_ptr<Outcome> outcome;
};

// Where the state stood when a snapshot was taken.
struct SnapshotPoint {
  uint64_t applied_index = 0;
  int64_t revision = 0;  // the state's own version there (logged only)
};

class Fsm {
 public:
  // Takes one pair of the state: `space` is the Fsm's own numbering of its
  // key spaces (column families), key and value its bytes. Errors stop the
  // stream.
  using PairSink = std::function<Error(uint32_t space, std::string_view key, std::string_view value)>;
  // Streams a snapshot's pairs into the sink it is given.
  using Fetch = std::function<Error(const PairSink&)>;

  virtual ~Fsm() = default;

  // Applies the committed entry at `index` (commands framed as
  // common/entry_frames.h says) and appends each command's outcome to
  // `applied`, tagged as it was proposed. Entries at or below
  // applied_index() are skipped. A malformed command is an outcome, not an
  // error. Errors: the state database failed; the member must stop, as
  // continuing would diverge from the log.
  virtual Error apply(uint64_t index, std::string_view entry, std::vector<Applied>* applied) = 0;
  // The last log index whose entry is reflected in the state (0: none).
  virtual uint64_t applied_index() const = 0;
  // True when the state was restored from a snapshot above `log_last_index`
  // and nothing applied since: a log that ends below it is not damaged.
  virtual bool restored_ahead_of(uint64_t log_last_index) const = 0;
  // The last log index whose entry does not build the state: a state
  // restored from an etcd snapshot file (etcd_snapshot/restore.h) was not
  // made by the log's first entries (the bootstrap configuration), so a
  // member may be given the state only, never those entries (etcd's restore
  // writes a Raft snapshot at its commit index for the same reason). 0: the
  // log built the whole state.
  virtual uint64_t log_floor() const = 0;

  // Before libraft takes a snapshot (and may drop entries up to it): makes
  // the state durable up to applied_index() and keeps the state at that
  // index for members that will install it (streamed by Peer.FetchSnapshot).
  // Fills `at`. Errors: the database's; the snapshot is then skipped.
  virtual Error take_snapshot(SnapshotPoint* at) = 0;
  // Makes the state durable up to applied_index(), as take_snapshot does,
  // without keeping a copy: before libraft replaces its log with a snapshot
  // the state is already past (the entries up to the snapshot then leave
  // the log, and the state database may have them only in memory).
  // Errors: the database's.
  virtual Error make_durable() = 0;
  // A whole state fetched and kept aside, not in use yet (stage). Dropping
  // it discards it.
  class Staged {
   public:
    virtual ~Staged() = default;
    // The last log index reflected in the staged state.
    virtual uint64_t applied_index() const = 0;
  };
  // Fetches a whole state, streamed by `fetch`, and keeps it aside without
  // changing the state in use. Unlike the other methods, any thread may
  // call it, while the consensus thread goes on: one call at a time, and
  // not while restore or restore_staged runs. Errors: the fetch's, the
  // storage's; nothing changed.
  virtual Error stage(const Fetch& fetch, std::unique_ptr<Staged>* out) = 0;
  // Replaces the whole state with a staged one. On error, *damaged tells
  // whether the old state was already partly replaced (the member must then
  // stop).
  virtual Error restore_staged(Staged& staged, bool* damaged) = 0;
  // Replaces the whole state with a snapshot's, streamed by `fetch`: stage,
  // then restore_staged. Errors and *damaged as theirs.
  Error restore(const Fetch& fetch, bool* damaged) {
    *damaged = false;
    std::unique_ptr<Staged> staged;
    if (Error e = stage(fetch, &staged)) return e;
    return restore_staged(*staged, damaged);
  }
};

}  // namespace etcdq::consensus
