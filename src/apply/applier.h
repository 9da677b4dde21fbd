// The state machine: one deterministic function from committed log entries
// to state (DESIGN.md, "Apply is deterministic"). Every member applies the
// same entries in the same order and reaches the same state; no clock,
// randomness or local state is consulted here.
//
// Idempotent across restarts: the applied index is written in the same
// RocksDB batch as the state an entry produced, and entries at or below it
// are skipped.
//
// Each command runs down the apply chain (chain.h), built once here:
// corrupt → capped → auth → one per key-space plug-in → backend.
//
// Thread-safety: one thread (the consensus thread) calls apply().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "apply/alarms.h"
#include "apply/chain.h"
#include "apply/kv.h"
#include "apply/members.h"
#include "apply/result.h"
#include "common/error.h"
#include "lease/lessor.h"
#include "mvcc/store.h"
#include "storage/bulk_load.h"

namespace etcdq::keyspace {
class Instances;
}
namespace etcdq::auth {
class Store;
}

namespace etcdq::apply {

class Applier {
 public:
  // `plugins`: the member's key-space plug-ins (keyspace/registry.h), a
  // layer each (plugin_layer.h); null or empty leaves every key plain.
  // `auth`: null leaves every command unchecked and refuses auth management
  // (auth_layer.h).
  Applier(mvcc::Store* store, lease::Lessor* lessor, Alarms* alarms, Members* members,
          keyspace::Instances* plugins, auth::Store* auth = nullptr);
  ~Applier();

  // The chain's layers, top first, by name (Layer::name).
  std::vector<std::string_view> chain() const;
  // The key space the chain gives keys (the plug-in layer's; plain without
  // one), for the member's readers: a Range on a view must read what the
  // same Range inside a Txn reads. Its read side is safe on any thread.
  KeySpace& keys() const { return *keys_; }

  uint64_t applied_index() const { return applied_index_; }
  int64_t revision() const { return store_->view()->revision(); }
  storage::Engine* engine() const { return store_->engine(); }
  // Syncs the state database: everything applied so far survives a crash.
  Error make_durable() { return store_->engine()->make_durable(); }

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
  // mvcc::kMetaLogFloor (consensus/fsm.h, Fsm::log_floor); 0 when unset.
  uint64_t log_floor() const;
  using PairSink = std::function<Error(storage::Cf, std::string_view key, std::string_view value)>;
  Error restore(const std::function<Error(const PairSink&)>& fetch, bool* damaged);

  // A whole state fetched into table files beside the database and not in
  // it yet (stage); restore_staged puts it in. Dropping it removes the
  // files. Owned by one thread at a time.
  class Staged;
  // restore in two steps: stage fetches the whole state (`fetch` streams its
  // pairs in column family then key order; latest pairs are ignored, for
  // latest is rebuilt from history: mvcc/derive.h) into table files beside the database and leaves the
  // state as it is, so that the transfer can run while libraft stores the snapshot's
  // metadata (issue #36); restore_staged then replaces the state with it.
  // stage may run on any thread while the apply thread goes on, one call at
  // a time and never beside another stage or restore (they share the files'
  // directory). Errors: the fetch's, the file system's, a state without an
  // applied index, a malformed history pair; the state is unchanged.
  Error stage(const std::function<Error(const PairSink&)>& fetch, std::unique_ptr<Staged>* out);
  // Apply thread. Errors and *damaged as restore's.
  Error restore_staged(Staged& staged, bool* damaged);

 private:
  void apply_command(mvcc::Writer& w, std::string_view bytes, Result* out);

  mvcc::Store* store_;
  lease::Lessor* lessor_;
  Alarms* alarms_;
  Members* members_;
  uint64_t applied_index_;
  // The chain, bottom first (each layer holds the one below); head_ is
  // the top.
  std::vector<std::unique_ptr<Layer>> layers_;
  Layer* head_ = nullptr;
  KeySpace* keys_ = &plain_keys();
};

class Applier::Staged {
 public:
  // The applied index the staged state is at.
  uint64_t applied_index() const { return applied_index_; }

 private:
  friend class Applier;
  std::unique_ptr<storage::BulkLoad> load_;
  std::string applied_;    // the applied_index pair's value, written last
  uint64_t applied_index_ = 0;
  int64_t live_keys_ = 0;  // pairs of `latest` rebuilt: the store's key count
};

}  // namespace etcdq::apply
