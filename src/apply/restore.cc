// Applier::restore: replace the state with a snapshot's (applier.h).
#include <spdlog/spdlog.h>

#include <chrono>

#include "apply/applier.h"
#include "mvcc/codec.h"
#include "mvcc/derive.h"
#include "storage/batch.h"
#include "storage/bulk_load.h"

namespace etcdq::apply {
namespace {

// The applied index of the last restored state (local, not replicated).
constexpr std::string_view kRestoredIndex = "restored_index";

// A member's own identity lives in the meta column family too
// (member/identity.h); it is not part of the replicated state.
bool is_local_meta(std::string_view key) {
  return key == "member_id" || key == "cluster_id" || key == kRestoredIndex || key == mvcc::kMetaLogFloor;
}

// Deletes every key of `cf` (all but the local identity in meta).
Error clear(storage::Engine* e, storage::Cf cf) {
  storage::Iterator it = e->iterator(cf);
  storage::Batch b(e);
  if (cf == storage::Cf::kMeta) {
    for (it.seek_to_first(); it.valid(); it.next()) {
      if (!is_local_meta(it.key())) b.remove(cf, it.key());
    }
  } else {
    it.seek_to_last();
    if (!it.valid()) return {};
    std::string end = std::string(it.key()) + '\0';  // past the last key
    it.seek_to_first();
    b.remove_range(cf, it.key(), end);
  }
  return e->write(b);
}

}  // namespace

bool Applier::restored_ahead_of(uint64_t log_last_index) const {
  std::string v;
  auto* e = store_->engine();
  if (!e->get(storage::Cf::kMeta, kRestoredIndex, &v)) return false;
  // The state came whole from a snapshot at this index, and nothing was
  // applied on top of it yet: the log may end below it.
  return static_cast<uint64_t>(mvcc::decode_i64(v)) == applied_index_ && log_last_index < applied_index_;
}

uint64_t Applier::log_floor() const {
  std::string v;
  if (!store_->engine()->get(storage::Cf::kMeta, mvcc::kMetaLogFloor, &v)) return 0;
  return static_cast<uint64_t>(mvcc::decode_i64(v));
}

Error Applier::restore(const std::function<Error(const PairSink&)>& fetch, bool* damaged) {
  *damaged = false;
  std::unique_ptr<Staged> staged;
  if (Error err = stage(fetch, &staged)) return err;
  return restore_staged(*staged, damaged);
}

Error Applier::stage(const std::function<Error(const PairSink&)>& fetch, std::unique_ptr<Staged>* out) {
  // Written as table files, ingested whole by restore_staged
  // (storage/bulk_load.h).
  auto s = std::make_unique<Staged>();
  s->load_ = std::make_unique<storage::BulkLoad>(store_->engine());
  // The memtables flush while the new state arrives, on RocksDB's threads:
  // restore_staged's flush, on the install's path, then has little to do.
  store_->engine()->start_flush();
  bool any = false;
  mvcc::LatestFromHistory latest([&s](std::string_view key, std::string_view record) {
    return s->load_->add(storage::Cf::kLatest, key, record);
  });
  PairSink sink = [&](storage::Cf cf, std::string_view key, std::string_view value) -> Error {
    any = true;
    switch (cf) {
      case storage::Cf::kMeta:
        if (is_local_meta(key)) return {};
        if (key == mvcc::kMetaAppliedIndex) {
          s->applied_.assign(value);
          return {};
        }
        break;
      case storage::Cf::kLatest:
        return {};  // rebuilt from history (an older sender sends it too)
      case storage::Cf::kHistory:
        if (Error e = s->load_->add(cf, key, value)) return e;
        return latest.add(key, value);
      case storage::Cf::kRevlog:
        break;
    }
    return s->load_->add(cf, key, value);
  };
  if (Error err = fetch(sink)) return err;
  if (!any) return errors::internal("the snapshot is empty");
  s->live_keys_ = latest.live_keys();
  if (s->applied_.empty()) return errors::internal("the snapshot carries no applied index");
  // A sender's bytes: decode_i64 reads a short value as 0, and a state
  // claimed at the wrong index has the entries after it applied again.
  if (s->applied_.size() != 8) {
    return errors::internal("the snapshot's applied index is malformed (" + std::to_string(s->applied_.size()) +
                            " bytes, not 8)");
  }
  const int64_t at = mvcc::decode_i64(s->applied_);
  if (at <= 0) return errors::internal("the snapshot's applied index is " + std::to_string(at));
  s->applied_index_ = static_cast<uint64_t>(at);
  *out = std::move(s);
  return {};
}

Error Applier::restore_staged(Staged& staged, bool* damaged) {
  storage::Engine* e = store_->engine();
  *damaged = false;
  // Each step's time, logged (etcd logs its own restore's, "restored mvcc
  // store" with "took"): the old state's flush and removal, the ingest, the
  // final flush.
  using SteadyClock = std::chrono::steady_clock;
  auto ms_since = [](SteadyClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - t).count();
  };
  auto step = SteadyClock::now();
  // The old state goes only now, with the whole new one at hand (a source
  // that failed midway changed nothing). First the applied index, durably:
  // a crash from then on restarts with no state, and libraft hands the
  // snapshot over again.
  *damaged = true;
  applied_index_ = 0;
  {
    storage::Batch b(e);
    b.remove(storage::Cf::kMeta, mvcc::kMetaAppliedIndex);
    if (Error err = e->write(b)) return err;
    if (Error err = e->make_durable()) return err;
  }
  for (int c = 0; c < storage::kCfCount; ++c) {
    if (Error err = clear(e, static_cast<storage::Cf>(c))) return err;
  }
  const auto cleared_ms = ms_since(step);
  step = SteadyClock::now();
  if (Error err = staged.load_->ingest()) return err;
  const auto ingested_ms = ms_since(step);
  step = SteadyClock::now();
  {
    storage::Batch b(e);
    b.put(storage::Cf::kMeta, mvcc::kMetaAppliedIndex, staged.applied_);
    b.put(storage::Cf::kMeta, kRestoredIndex, staged.applied_);
    if (Error err = e->write(b)) return err;
    if (Error err = e->make_durable()) return err;
  }
  const auto durable_ms = ms_since(step);
  applied_index_ = staged.applied_index_;
  lessor_->reload();
  alarms_->reload();
  members_->reload();
  head_->restored();  // the layers' mirrors (a plug-in's records)
  store_->reload(staged.live_keys_);
  *damaged = false;
  spdlog::info(
      "state restored from a snapshot: applied index {}, revision {} (old state removed in {} ms, new one "
      "ingested in {} ms, made durable in {} ms)",
      applied_index_, revision(), cleared_ms, ingested_ms, durable_ms);
  return {};
}

}  // namespace etcdq::apply
