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
#include <string_view>
#include <variant>
#include <vector>

#include "apply/alarms.h"
#include "apply/kv.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcdq/command.pb.h"
#include "lease/lessor.h"
#include "mvcc/store.h"

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
  Applier(mvcc::Store* store, lease::Lessor* lessor, Alarms* alarms);

  uint64_t applied_index() const { return applied_index_; }
  int64_t revision() const { return store_->view()->revision(); }
  // Syncs the state database: everything applied so far survives a crash.
  Error make_durable() { return store_->engine()->sync_wal(); }

  // Applies the entry at `index`. A returned error means the state database
  // failed and the member must stop: continuing would diverge from the log.
  Error apply(uint64_t index, std::string_view payload, std::vector<Result>* results);
  // Records that `index` (a barrier or configuration entry) is applied.
  Error apply_noop(uint64_t index);

 private:
  void apply_command(mvcc::Writer& w, std::string_view bytes, Result* out);
  Error capped(const Command& cmd) const;

  mvcc::Store* store_;
  lease::Lessor* lessor_;
  Alarms* alarms_;
  uint64_t applied_index_;
  LeaseExists leases_;
};

}  // namespace etcdq::apply
