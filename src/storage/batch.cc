#include "storage/batch.h"

#include <array>
#include <string>

namespace etcdq::storage {
namespace {

// Replays a RocksDB batch's puts and removes of one column family into a
// WriteBatchWithIndex (or another batch), in their order.
template <typename Out>
class Replay : public rocksdb::WriteBatch::Handler {
 public:
  using Handles = std::array<rocksdb::ColumnFamilyHandle*, kCfCount>;
  Replay(const Handles& handles, Out* out, int only_cf) : handles_(handles), out_(out), only_cf_(only_cf) {}

  rocksdb::Status PutCF(uint32_t id, const rocksdb::Slice& key, const rocksdb::Slice& value) override {
    rocksdb::ColumnFamilyHandle* h = nullptr;
    if (rocksdb::Status s = handle(id, &h); !s.ok() || !h) return s;
    return out_->Put(h, key, value);
  }
  rocksdb::Status DeleteCF(uint32_t id, const rocksdb::Slice& key) override {
    rocksdb::ColumnFamilyHandle* h = nullptr;
    if (rocksdb::Status s = handle(id, &h); !s.ok() || !h) return s;
    return out_->Delete(h, key);
  }

 private:
  // `*h`: the handle of column family `id` when it is to be replayed, else
  // null (skipped). An id of no column family of ours is an error, never
  // a record dropped in silence.
  rocksdb::Status handle(uint32_t id, rocksdb::ColumnFamilyHandle** h) const {
    for (int i = 0; i < kCfCount; ++i) {
      if (handles_[i]->GetID() != id) continue;
      *h = only_cf_ < 0 || only_cf_ == i ? handles_[i] : nullptr;
      return rocksdb::Status::OK();
    }
    return rocksdb::Status::InvalidArgument("write to an unknown column family id " + std::to_string(id));
  }
  Handles handles_;
  Out* out_;
  int only_cf_;  // -1: every column family
};

}  // namespace

std::array<rocksdb::ColumnFamilyHandle*, kCfCount> IndexedBatch::handles() const {
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> out{};
  for (int i = 0; i < kCfCount; ++i) out[i] = engine_->cf(static_cast<Cf>(i));
  return out;
}

rocksdb::WriteBatchWithIndex* IndexedBatch::side_index(Cf cf) const {
  if (!(appended_ & bit(cf))) return nullptr;
  auto& side = side_[static_cast<int>(cf)];
  if (!side) {
    side = std::make_unique<rocksdb::WriteBatchWithIndex>(rocksdb::BytewiseComparator(), 0, /*overwrite_key=*/true);
    Replay<rocksdb::WriteBatchWithIndex> replay(handles(), side.get(), static_cast<int>(cf));
    // Only puts and removes of our column families are ever added (put(),
    // remove()), which Replay takes, so this cannot fail; merged() checks
    // the same replay before anything is written.
    appends_.Iterate(&replay);
  }
  return side.get();
}

bool IndexedBatch::get(Cf cf, std::string_view key, std::string* value) const {
  auto* h = engine_->cf(cf);
  rocksdb::WriteBatchWithIndex* index = unindexed(cf) ? side_index(cf) : &batch_mut();
  if (!index) {
    rocksdb::PinnableSlice v;
    if (!engine_->db()->Get(rocksdb::ReadOptions(), h, to_slice(key), &v).ok()) return false;
    value->assign(v.data(), v.size());
    return true;
  }
  return index->GetFromBatchAndDB(engine_->db(), rocksdb::ReadOptions(), h, to_slice(key), value).ok();
}

Iterator IndexedBatch::iterator(Cf cf) const {
  auto* h = engine_->cf(cf);
  rocksdb::Iterator* base = engine_->db()->NewIterator(rocksdb::ReadOptions(), h);
  rocksdb::WriteBatchWithIndex* index = unindexed(cf) ? side_index(cf) : &batch_mut();
  return Iterator(index ? index->NewIteratorWithBase(h, base) : base);
}

rocksdb::Status IndexedBatch::merged(std::unique_ptr<rocksdb::WriteBatch>* out) const {
  out->reset();
  if (appends_.Count() == 0) return rocksdb::Status::OK();
  auto all = std::make_unique<rocksdb::WriteBatch>(*batch_mut().GetWriteBatch());
  Replay<rocksdb::WriteBatch> replay(handles(), all.get(), -1);
  rocksdb::Status s = appends_.Iterate(&replay);
  if (s.ok()) *out = std::move(all);
  return s;
}

}  // namespace etcdq::storage
