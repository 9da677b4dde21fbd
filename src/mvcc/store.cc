#include "mvcc/store.h"

#include "mvcc/metrics.h"

#include "mvcc/codec.h"
#include "mvcc/compactor.h"
#include "mvcc/watch_hub.h"

#include <utility>

namespace etcdq::mvcc {

ReadView::ReadView(storage::Snapshot snap, uint64_t applied_index, int64_t revision, int64_t compact_revision)
    : snap_(std::move(snap)),
      applied_index_(applied_index),
      revision_(revision),
      compact_revision_(compact_revision) {
  mvcc_metrics().open_read_views.Increment();
}

ReadView::~ReadView() { mvcc_metrics().open_read_views.Decrement(); }

namespace {
int64_t read_meta(storage::Engine* e, std::string_view name, int64_t dflt) {
  std::string v;
  return e->get(storage::Cf::kMeta, name, &v) ? decode_i64(v) : dflt;
}
}  // namespace

Store::Store(storage::Engine* engine) : engine_(engine) {
  mvcc_metrics();  // shown at 0 from the start, as etcd's
  auto applied = static_cast<uint64_t>(read_meta(engine, kMetaAppliedIndex, 0));
  int64_t rev = read_meta(engine, kMetaRevision, 1);
  // etcd starts with no compaction at -1, so Compact(0) succeeds on a fresh store.
  int64_t scheduled = read_meta(engine, kMetaCompactScheduled, -1);
  int64_t finished = read_meta(engine, kMetaCompactFinished, -1);
  publish(applied, rev, scheduled);
  compactor_ = std::make_unique<Compactor>(engine, finished);
  if (scheduled > finished) compactor_->schedule(scheduled);
  hub_ = std::make_unique<WatchHub>(this);
  count_keys();
}

void Store::count_keys() {
  int64_t n = 0;
  storage::Iterator it = engine_->iterator(storage::Cf::kLatest);
  for (it.seek_to_first(); it.valid(); it.next()) ++n;
  keys_.store(n, std::memory_order_relaxed);
}

void Store::reload(std::optional<int64_t> live_keys) {
  auto applied = static_cast<uint64_t>(read_meta(engine_, kMetaAppliedIndex, 0));
  int64_t rev = read_meta(engine_, kMetaRevision, 1);
  int64_t scheduled = read_meta(engine_, kMetaCompactScheduled, -1);
  publish(applied, rev, scheduled);
  // Sweeping again what this member's compactor already swept is harmless:
  // history below a compaction is the same on every member.
  compactor_->schedule(scheduled);
  hub_->publish({}, /*complete=*/false, rev);
  if (live_keys) {
    keys_.store(*live_keys, std::memory_order_relaxed);
  } else {
    count_keys();
  }
}

Store::~Store() {
  hub_.reset();
  compactor_.reset();
}

std::shared_ptr<const ReadView> Store::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

void Store::publish(uint64_t applied_index, int64_t revision, int64_t compact_revision) {
  auto v = std::make_shared<const ReadView>(storage::Snapshot(engine_), applied_index, revision, compact_revision);
  std::shared_ptr<const ReadView> old;  // released outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  old = std::exchange(view_, std::move(v));
}

}  // namespace etcdq::mvcc
