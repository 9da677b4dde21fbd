// Applier::restore: replace the state with a snapshot's (applier.h).
#include <spdlog/spdlog.h>

#include "apply/applier.h"
#include "mvcc/codec.h"

namespace etcdq::apply {
namespace {

constexpr size_t kBatchBytes = 4 << 20;
// The applied index of the last restored state (local, not replicated).
constexpr std::string_view kRestoredIndex = "restored_index";

// A member's own identity lives in the meta column family too
// (member/identity.h); it is not part of the replicated state.
bool is_local_meta(std::string_view key) {
  return key == "member_id" || key == "cluster_id" || key == kRestoredIndex;
}

// Deletes every key of `cf` (all but the local identity in meta).
Error clear(storage::Engine* e, storage::Cf cf) {
  auto* db = e->db();
  auto* h = e->cf(cf);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), h));
  rocksdb::WriteBatch b;
  if (cf == storage::Cf::kMeta) {
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      std::string_view k(it->key().data(), it->key().size());
      if (!is_local_meta(k)) b.Delete(h, it->key());
    }
  } else {
    it->SeekToLast();
    if (!it->Valid()) return {};
    std::string end = it->key().ToString() + '\0';  // past the last key
    it->SeekToFirst();
    b.DeleteRange(h, it->key(), end);
  }
  return e->write(&b);
}

}  // namespace

bool Applier::restored_ahead_of(uint64_t log_last_index) const {
  std::string v;
  auto* e = store_->engine();
  if (!e->db()->Get(rocksdb::ReadOptions(), e->cf(storage::Cf::kMeta),
                    rocksdb::Slice(kRestoredIndex.data(), kRestoredIndex.size()), &v).ok()) {
    return false;
  }
  // The state came whole from a snapshot at this index, and nothing was
  // applied on top of it yet: the log may end below it.
  return static_cast<uint64_t>(mvcc::decode_i64(v)) == applied_index_ && log_last_index < applied_index_;
}

Error Applier::restore(const std::function<Error(const PairSink&)>& fetch, bool* damaged) {
  storage::Engine* e = store_->engine();
  *damaged = false;
  // The old state goes when the first pair arrives (a source that cannot be
  // reached changes nothing). First the applied index, durably: a crash
  // from then on restarts with no state, and libraft hands the snapshot
  // over again.
  auto clear_all = [&]() -> Error {
    *damaged = true;
    applied_index_ = 0;
    rocksdb::WriteBatch b;
    b.Delete(e->cf(storage::Cf::kMeta), rocksdb::Slice(mvcc::kMetaAppliedIndex.data(), mvcc::kMetaAppliedIndex.size()));
    if (Error err = e->write(&b)) return err;
    if (Error err = e->sync_wal()) return err;
    for (int c = 0; c < storage::kCfCount; ++c) {
      if (Error err = clear(e, static_cast<storage::Cf>(c))) return err;
    }
    return {};
  };
  std::string applied;  // written last
  rocksdb::WriteBatch batch;
  Error write_error;
  auto flush = [&]() -> Error {
    if (batch.Count() == 0) return {};
    Error err = e->write(&batch);
    batch.Clear();
    return err;
  };
  PairSink sink = [&](storage::Cf cf, std::string_view key, std::string_view value) -> Error {
    if (!*damaged) {
      if (Error err = clear_all()) return err;
    }
    if (cf == storage::Cf::kMeta) {
      if (is_local_meta(key)) return {};
      if (key == mvcc::kMetaAppliedIndex) {
        applied.assign(value);
        return {};
      }
    }
    batch.Put(e->cf(cf), rocksdb::Slice(key.data(), key.size()), rocksdb::Slice(value.data(), value.size()));
    if (batch.GetDataSize() >= kBatchBytes) return flush();
    return {};
  };
  if (Error err = fetch(sink)) return err;
  if (!*damaged) return errors::internal("the snapshot is empty");
  if (Error err = flush()) return err;
  if (applied.empty()) return errors::internal("the snapshot carries no applied index");
  {
    rocksdb::WriteBatch b;
    b.Put(e->cf(storage::Cf::kMeta), rocksdb::Slice(mvcc::kMetaAppliedIndex.data(), mvcc::kMetaAppliedIndex.size()),
          applied);
    b.Put(e->cf(storage::Cf::kMeta), kRestoredIndex, applied);
    if (Error err = e->write(&b)) return err;
    if (Error err = e->sync_wal()) return err;
  }
  applied_index_ = static_cast<uint64_t>(mvcc::decode_i64(applied));
  lessor_->reload();
  alarms_->reload();
  members_->reload();
  queues_->reload();
  store_->reload();
  *damaged = false;
  spdlog::info("state restored from a snapshot: applied index {}, revision {}", applied_index_, revision());
  return {};
}

}  // namespace etcdq::apply
