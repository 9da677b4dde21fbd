// The state machine: one deterministic function from committed log entries
// to state (DESIGN.md, "Apply is deterministic"). Every member applies the
// same entries in the same order and reaches the same state; no clock,
// randomness or local state is consulted here.
//
// Idempotent across restarts: the applied index is written in the same
// RocksDB batch as the state an entry produced, and entries at or below it
// are skipped.
//
// Thread-safety: one thread (the consensus thread) calls apply().
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <variant>
#include <vector>

#include "apply/alarms.h"
#include "apply/members.h"
#include "apply/kv.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcdq/command.pb.h"
#include "lease/lessor.h"
#include "mvcc/store.h"
#include "queue/book.h"

namespace etcdq::apply {

// The outcome of one command, for whoever proposed it.
struct Result {
  uint64_t origin = 0;
  uint64_t proposal_id = 0;
  Error error;  // the client's error (etcd's code and message); state unchanged
  std::variant<std::monostate, etcdserverpb::PutResponse, etcdserverpb::DeleteRangeResponse,
               etcdserverpb::TxnResponse, etcdserverpb::CompactionResponse, etcdserverpb::LeaseGrantResponse,
               etcdserverpb::LeaseRevokeResponse, etcdserverpb::AlarmResponse>
      response;
  // Compact(physical=true): answer once physical compaction reached this.
  int64_t wait_compaction = 0;
};

class Applier {
 public:
  Applier(mvcc::Store* store, lease::Lessor* lessor, Alarms* alarms, Members* members, queue::Book* queues);

  uint64_t applied_index() const { return applied_index_; }
  int64_t revision() const { return store_->view()->revision(); }
  storage::Engine* engine() const { return store_->engine(); }
  // Syncs the state database: everything applied so far survives a crash.
  Error make_durable() { return store_->engine()->sync_wal(); }

  // Applies the entry at `index`. A returned error means the state database
  // failed and the member must stop: continuing would diverge from the log.
  Error apply(uint64_t index, std::string_view payload, std::vector<Result>* results);
  // Records that `index` (a barrier or configuration entry) is applied.
  Error apply_noop(uint64_t index);

  // Replaces the whole state with a snapshot's, for a member too far behind
  // the leader to be sent the log. `fetch` streams the snapshot's pairs into
  // the sink it is given (a Peer.FetchSnapshot call). Readers keep the view
  // they hold until the new state is complete and published. Errors: the
  // fetch's, or the database's. On error, *damaged tells whether the old
  // state was already partly replaced: then the member must stop, and its
  // restart (which finds no applied index) fetches the snapshot again.
  // True when the state was restored from a snapshot above `log_last_index`
  // and nothing applied since: a log that ends below it is not damaged.
  bool restored_ahead_of(uint64_t log_last_index) const;
  using PairSink = std::function<Error(storage::Cf, std::string_view key, std::string_view value)>;
  Error restore(const std::function<Error(const PairSink&)>& fetch, bool* damaged);

 private:
  void apply_command(mvcc::Writer& w, std::string_view bytes, Result* out);
  Error capped(const Command& cmd) const;

  mvcc::Store* store_;
  lease::Lessor* lessor_;
  Alarms* alarms_;
  Members* members_;
  queue::Book* queues_;
  uint64_t applied_index_;
  LeaseExists leases_;
};

}  // namespace etcdq::apply
