// The apply thread's write side of the store. One Writer covers one Raft
// entry: every change it makes goes into one RocksDB batch, committed
// together with the entry's applied index (DESIGN.md: apply is idempotent
// across restarts). Reads through the Writer see its own uncommitted writes.
//
// Revisions follow etcd's storeTxnWrite (server/mvcc/kvstore_txn.go): all
// changes between begin() and end() share one main revision, current+1, with
// sub-revisions 0, 1, 2 ... in order; a txn that changes nothing leaves the
// revision as it was.
//
// Thread-safety: none; the apply thread owns it.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "etcd/api/mvccpb/kv.pb.h"
#include "mvcc/codec.h"
#include "mvcc/range.h"
#include "mvcc/store.h"
#include "storage/batch.h"

namespace etcdq::mvcc {

class Writer final : public Reader {
 public:
  explicit Writer(Store* store);

  storage::Iterator iterator(storage::Cf cf) const override { return batch_.iterator(cf); }
  bool get(storage::Cf cf, std::string_view key, std::string* value) const override {
    return batch_.get(cf, key, value);
  }

  // The current revision: of the store, plus the txns ended in this Writer.
  int64_t revision() const { return revision_; }
  int64_t compact_revision() const { return compact_revision_; }

  // --- one txn (one main revision) ---
  void begin();
  // Writes `key`; create_revision and version follow from its live version.
  // `prev` (optional) receives that live version; returns whether one existed.
  // `written` (optional) receives the version written, key included.
  bool put(std::string_view key, std::string_view value, int64_t lease, mvccpb::KeyValue* prev,
           mvccpb::KeyValue* written = nullptr);
  // Deletes every live key in the range (range.h's `end` convention);
  // returns how many. `prev` (optional) receives them in key order.
  int64_t delete_range(std::string_view key, std::string_view end, std::vector<mvccpb::KeyValue>* prev);
  // A range inside the txn, at etcd's txn read revision: the revision the
  // txn will produce if it has changed something so far.
  Error range(std::string_view key, std::string_view end, const RangeOptions& opts, RangeResult* out) const;
  // The live version of `key`, if any (the state a txn's compares see).
  bool get_latest(std::string_view key, mvccpb::KeyValue* kv) const;
  // Ends the txn; returns the revision it produced (or the unchanged one).
  int64_t end();
  bool txn_changed() const { return changes_ > 0; }

  // Records the compaction revision; physical removal starts after commit().
  void compact(int64_t rev);

  // Other replicated records in the meta column family (the lease table),
  // written in this entry's batch.
  void put_meta(std::string_view key, std::string_view value);
  void delete_meta(std::string_view key);

  // Called with each key delete_range removes, after its removal is in the
  // batch (a key-space plug-in keeps records of its keys: keyspace/kind.h).
  // May write through `w`.
  using DeleteTap = std::function<void(Writer& w, std::string_view key)>;
  void set_delete_tap(DeleteTap tap) { delete_tap_ = std::move(tap); }

  // Writes the batch with `applied_index`, publishes the new view, and
  // hands the batch's events to the watch hub.
  Error commit(uint64_t applied_index);

 private:
  Revision next_rev() { return {revision_ + 1, changes_++}; }

  Store* store_;
  storage::Engine* engine_;
  storage::IndexedBatch batch_;
  int64_t revision_;
  int64_t compact_revision_;
  int64_t scheduled_compaction_ = 0;
  int64_t changes_ = 0;  // in the current txn
  int64_t keys_delta_ = 0;  // live keys created less removed, in the batch (Store::keys)
  bool meta_dirty_ = false;
  // Events for the watch hub, built only when some watcher exists.
  bool collect_events_;
  std::vector<mvccpb::Event> events_;
  DeleteTap delete_tap_;
};

}  // namespace etcdq::mvcc
