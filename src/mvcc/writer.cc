#include "mvcc/writer.h"

#include "mvcc/metrics.h"

#include "mvcc/codec.h"
#include "mvcc/compactor.h"
#include "mvcc/watch_hub.h"

namespace etcdq::mvcc {
Writer::Writer(Store* store)
    : store_(store),
      engine_(store->engine()),
      batch_(store->engine()),
      revision_(store->view()->revision()),
      compact_revision_(store->view()->compact_revision()),
      collect_events_(store->watch_hub().active()) {}

void Writer::begin() { changes_ = 0; }

bool Writer::get_latest(std::string_view key, mvccpb::KeyValue* kv) const {
  std::string rec;
  if (!get(storage::Cf::kLatest, key, &rec)) return false;
  decode_record(rec, kv);
  kv->set_key(key.data(), key.size());
  return true;
}

bool Writer::put(std::string_view key, std::string_view value, int64_t lease, mvccpb::KeyValue* prev,
                 mvccpb::KeyValue* written) {
  mvccpb::KeyValue old;
  bool existed = get_latest(key, &old);
  mvcc_metrics().put.Increment();
  if (!existed) ++keys_delta_;
  Revision rev = next_rev();
  mvccpb::KeyValue kv;
  kv.set_create_revision(existed ? old.create_revision() : rev.main);
  kv.set_mod_revision(rev.main);
  kv.set_version(existed ? old.version() + 1 : 1);
  kv.set_lease(lease);
  kv.set_value(value.data(), value.size());

  // etcd's metricsTxnWrite adds the key's and the value's lengths.
  mvcc_metrics().put_size.Increment(static_cast<double>(key.size() + value.size()));
  std::string rec;
  encode_record(kv, &rec);
  batch_.put(storage::Cf::kLatest, key, rec);
  rec.insert(rec.begin(), static_cast<char>(RecordType::kPut));
  batch_.put(storage::Cf::kHistory, history_key(key, rev), rec);
  std::string log(1, static_cast<char>(RecordType::kPut));
  log.append(key);
  batch_.put(storage::Cf::kRevlog, revlog_key(rev), log);
  // The lease -> keys index follows the key's lease.
  const auto meta = storage::Cf::kMeta;
  if (existed && old.lease() != 0 && old.lease() != lease) batch_.remove(meta, lease_index_key(old.lease(), key));
  if (lease != 0 && (!existed || old.lease() != lease)) batch_.put(meta, lease_index_key(lease, key), "");
  if (collect_events_) {
    events_.emplace_back();
    auto& ev = events_.back();
    ev.set_type(mvccpb::Event::PUT);
    *ev.mutable_kv() = kv;
    ev.mutable_kv()->set_key(key.data(), key.size());
    if (existed) *ev.mutable_prev_kv() = old;
  }
  if (prev && existed) *prev = std::move(old);
  if (written) {
    *written = std::move(kv);
    written->set_key(key.data(), key.size());
  }
  return existed;
}

int64_t Writer::delete_range(std::string_view key, std::string_view end,
                             std::vector<mvccpb::KeyValue>* prev) {
  RangeResult live;
  mvcc::range_uncounted(*this, key, end, RangeOptions{}, revision_, compact_revision_, &live);
  mvcc_metrics().del.Increment();
  keys_delta_ -= static_cast<int64_t>(live.kvs.size());
  for (auto& kv : live.kvs) {
    Revision rev = next_rev();
    batch_.remove(storage::Cf::kLatest, kv.key());
    batch_.put(storage::Cf::kHistory, history_key(kv.key(), rev),
               std::string(1, static_cast<char>(RecordType::kDelete)));
    std::string log(1, static_cast<char>(RecordType::kDelete));
    log.append(kv.key());
    batch_.put(storage::Cf::kRevlog, revlog_key(rev), log);
    if (kv.lease() != 0) batch_.remove(storage::Cf::kMeta, lease_index_key(kv.lease(), kv.key()));
    if (collect_events_) {
      events_.emplace_back();
      auto& ev = events_.back();
      ev.set_type(mvccpb::Event::DELETE);
      ev.mutable_kv()->set_key(kv.key());
      ev.mutable_kv()->set_mod_revision(rev.main);
      *ev.mutable_prev_kv() = kv;
    }
    if (delete_tap_) delete_tap_(*this, kv.key());
  }
  if (prev) *prev = std::move(live.kvs);
  return static_cast<int64_t>(live.count);
}

Error Writer::range(std::string_view key, std::string_view end, const RangeOptions& opts,
                    RangeResult* out) const {
  int64_t rev = revision_ + (changes_ > 0 ? 1 : 0);
  return mvcc::range(*this, key, end, opts, rev, compact_revision_, out);
}

int64_t Writer::end() {
  if (changes_ > 0) {
    ++revision_;
    meta_dirty_ = true;
  }
  changes_ = 0;
  return revision_;
}

void Writer::put_meta(std::string_view key, std::string_view value) {
  batch_.put(storage::Cf::kMeta, key, value);
}

void Writer::delete_meta(std::string_view key) { batch_.remove(storage::Cf::kMeta, key); }

void Writer::compact(int64_t rev) {
  compact_revision_ = rev;
  scheduled_compaction_ = rev;
  meta_dirty_ = true;
}

Error Writer::commit(uint64_t applied_index) {
  const auto meta = storage::Cf::kMeta;
  batch_.put(meta, kMetaAppliedIndex, encode_i64(static_cast<int64_t>(applied_index)));
  if (meta_dirty_) {
    batch_.put(meta, kMetaRevision, encode_i64(revision_));
    batch_.put(meta, kMetaCompactScheduled, encode_i64(compact_revision_));
  }
  // The Raft log replays this entry after a crash (storage/engine.h).
  if (Error e = engine_->write(batch_, storage::Durability::kReplayed)) return e;
  store_->add_keys(keys_delta_);
  keys_delta_ = 0;
  int64_t before = store_->view()->revision();
  store_->publish(applied_index, revision_, compact_revision_);
  if (revision_ != before) store_->watch_hub().publish(std::move(events_), collect_events_, revision_);
  if (scheduled_compaction_ > 0) store_->compactor().schedule(scheduled_compaction_);
  return {};
}

}  // namespace etcdq::mvcc
