// The revisioned key-value store of etcd's data model (DESIGN.md, "MVCC, as
// etcd defines it"), kept entirely in RocksDB so the data set may exceed RAM.
//
// One revision counter, starting at 1 on an empty store. The apply thread is
// the only writer (writer.h); after each committed batch it publishes a new
// immutable ReadView (a RocksDB snapshot plus the counters at that point),
// which readers on any thread take without waiting for apply.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "mvcc/reader.h"
#include "storage/engine.h"
#include "storage/snapshot.h"

namespace etcdq::mvcc {

class Compactor;
class WatchHub;

// The store as of one applied Raft index. Immutable; safe to share.
class ReadView final : public Reader {
 public:
  // Counted in etcd_mvcc_db_open_read_transactions while alive (mvcc/metrics.h).
  ReadView(storage::Snapshot snap, uint64_t applied_index, int64_t revision, int64_t compact_revision);
  ~ReadView() override;
  ReadView(const ReadView&) = delete;
  ReadView& operator=(const ReadView&) = delete;

  storage::Iterator iterator(storage::Cf cf) const override { return snap_.iterator(cf); }
  bool get(storage::Cf cf, std::string_view key, std::string* value) const override {
    return snap_.get(cf, key, value);
  }

  // storage::Snapshot's bulk reads (no block cache fill), for whole passes.
  storage::Iterator bulk_iterator(storage::Cf cf) const { return snap_.bulk_iterator(cf); }
  bool bulk_get(storage::Cf cf, std::string_view key, std::string* value) const {
    return snap_.bulk_get(cf, key, value);
  }

  uint64_t applied_index() const { return applied_index_; }
  int64_t revision() const { return revision_; }                  // current revision
  int64_t compact_revision() const { return compact_revision_; }  // reads below fail

 private:
  storage::Snapshot snap_;
  uint64_t applied_index_;
  int64_t revision_;
  int64_t compact_revision_;
};

class Store {
 public:
  // Loads the counters from `engine` and resumes an unfinished compaction.
  // `engine` must outlive the store.
  explicit Store(storage::Engine* engine);
  ~Store();

  // The newest published view. Any thread.
  std::shared_ptr<const ReadView> view() const;

  storage::Engine* engine() const { return engine_; }
  Compactor& compactor() { return *compactor_; }
  WatchHub& watch_hub() { return *hub_; }

  // Apply thread: the database was replaced underneath (a snapshot
  // restore). Publishes a view of it, lets the compactor finish what it
  // records, and makes every watcher catch up from storage. `live_keys`:
  // the keys the latest family now holds, when the caller counted them as
  // it wrote them; otherwise they are counted here (a pass over the family
  // took 50-90 ms of a loaded member's install for 100,000 keys, issue #36).
  void reload(std::optional<int64_t> live_keys = std::nullopt);

  // Apply thread: after a batch is written, make it visible to readers.
  void publish(uint64_t applied_index, int64_t revision, int64_t compact_revision);

  // Live keys (etcd_debugging_mvcc_keys_total): counted once when the store
  // opens or reloads (one pass over the latest family), then kept by the
  // writer's commits (add_keys, apply thread). Any thread reads it.
  int64_t keys() const { return keys_.load(std::memory_order_relaxed); }
  void add_keys(int64_t delta) { keys_.fetch_add(delta, std::memory_order_relaxed); }

 private:
  storage::Engine* engine_;
  std::unique_ptr<Compactor> compactor_;
  std::unique_ptr<WatchHub> hub_;
  mutable std::mutex mu_;  // guards view_ (the pointer, not the view)
  std::shared_ptr<const ReadView> view_;
  std::atomic<int64_t> keys_{0};
  void count_keys();
};

}  // namespace etcdq::mvcc
