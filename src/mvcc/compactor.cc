#include "mvcc/compactor.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <unordered_set>

#include "common/progress.h"
#include "mvcc/codec.h"
#include "mvcc/metrics.h"
#include "storage/batch.h"

namespace etcdq::mvcc {
namespace {
constexpr int kBatchEntries = 4096;  // revlog entries per write: short pauses, few writes
}

Compactor::Compactor(storage::Engine* engine, int64_t finished)
    : engine_(engine), target_(finished), finished_(finished), thread_([this] { run(); }) {}

Compactor::~Compactor() { stop(); }

void Compactor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::multimap<int64_t, std::function<void(bool)>> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiters.swap(waiters_);
  }
  for (auto& [rev, done] : waiters) done(false);
}

void Compactor::schedule(int64_t rev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rev <= target_) return;
    target_ = rev;
  }
  cv_.notify_all();
}

void Compactor::when_finished(int64_t rev, std::function<void(bool)> done) {
  bool reached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reached = finished_ >= rev;
    if (!reached && !stop_) {
      waiters_.emplace(rev, std::move(done));
      return;
    }
  }
  done(reached);
}

int64_t Compactor::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void Compactor::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || target_ > finished_; });
    if (stop_) return;
    int64_t target = target_;
    lock.unlock();
    bool complete = compact_to(target);
    lock.lock();
    if (!complete) return;
    finished_ = target;
    std::vector<std::function<void(bool)>> ready;
    while (!waiters_.empty() && waiters_.begin()->first <= finished_) {
      ready.push_back(std::move(waiters_.begin()->second));
      waiters_.erase(waiters_.begin());
    }
    lock.unlock();
    for (auto& f : ready) f(true);
    lock.lock();
  }
}

bool Compactor::compact_to(int64_t rev) {
  const auto revlog = storage::Cf::kRevlog;
  const auto history = storage::Cf::kHistory;
  storage::Iterator log = engine_->iterator(revlog);
  // Changes at `rev` itself stay: a watch may start at the compaction
  // revision (etcd refuses only start revisions below it).
  const std::string stop_key = revlog_key({rev, 0});
  int64_t removed = 0;
  int64_t swept = 0;  // revlog entries
  log.seek_to_first();
  // Start, progress at most once a second, end with what it removed and
  // how long it took (issue #36: etcd's "compact tree index" / "finished
  // scheduled compaction" lines, with progress a long one lacked).
  const auto t0 = std::chrono::steady_clock::now();
  common::ProgressPacer pacer;
  const int64_t from = log.valid() && log.key().compare(stop_key) < 0 ? decode_revlog_key(log.key()).main : rev;
  spdlog::info("compaction to revision {} started: history from revision {}", rev, from);
  MvccMetrics& m = mvcc_metrics();
  auto whole_ms = [](std::chrono::steady_clock::time_point since) {
    return static_cast<double>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count());
  };
  while (log.valid() && log.key().compare(stop_key) < 0) {
    const auto batch_start = std::chrono::steady_clock::now();
    const int64_t removed_before = removed;
    if (pacer.due()) {
      int64_t at = decode_revlog_key(log.key()).main;
      spdlog::info("compaction to revision {}: at revision {} ({}% of revisions {}..{}), {} changes swept, {} "
                   "versions removed, {} ms",
                   rev, at, rev > from ? (at - from) * 100 / (rev - from) : 100, from, rev, swept, removed,
                   pacer.elapsed_ms());
    }
    storage::Batch batch(engine_);
    std::unordered_set<std::string> seen;  // keys already swept in this batch
    // A new one each batch: an iterator sees the data as it was when it was
    // made, so one kept across batches showed every version an earlier
    // batch removed again, and a key with many versions was swept again in
    // every batch its revlog entries reached (time grew with the square of
    // its history).
    storage::Iterator hist = engine_->iterator(history);
    for (int n = 0; n < kBatchEntries && log.valid() && log.key().compare(stop_key) < 0; ++n, log.next()) {
      std::string_view user_key = log.value().substr(1);
      batch.remove(revlog, log.key());
      ++swept;
      if (!seen.emplace(user_key).second) continue;
      // Sweep every version of this key at or below `rev`, newest first:
      // keep the newest if it is a put, remove the rest. Older versions kept
      // by an earlier compaction have no revlog entry any more, so they are
      // found here, through the key, not through the log.
      std::string k;
      Revision r;
      bool newest = true;
      for (hist.seek(history_key(user_key, {rev, INT64_MAX})); hist.valid(); hist.next()) {
        if (!decode_history_key(hist.key(), &k, &r) || k != user_key) break;
        bool is_put = hist.value().size() > 0 && static_cast<RecordType>(hist.value()[0]) == RecordType::kPut;
        // A change at `rev` itself stays, with its revlog entry (a watch may
        // start there).
        if (!(newest && (is_put || r.main == rev))) {
          batch.remove(history, hist.key());
          ++removed;
        }
        newest = false;
      }
    }
    // Replayed, as the entry that scheduled it (storage/engine.h): after a
    // crash the swept state and the finished mark are never ahead of it.
    if (Error e = engine_->write(batch, storage::Durability::kReplayed)) {
      spdlog::error("compaction to revision {} stopped: {}", rev, e.message());
      return false;
    }
    m.compaction_pause_ms.Observe(whole_ms(batch_start));
    m.compaction_keys.Increment(static_cast<double>(removed - removed_before));
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
  }
  storage::Batch done(engine_);
  done.put(storage::Cf::kMeta, kMetaCompactFinished, encode_i64(rev));
  if (Error e = engine_->write(done, storage::Durability::kReplayed)) {
    spdlog::error("compaction to revision {} not recorded: {}", rev, e.message());
    return false;
  }
  m.compaction_total_ms.Observe(whole_ms(t0));
  m.compaction_last.Set(static_cast<double>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()));
  spdlog::info("finished compaction to revision {}: removed {} versions ({} changes swept) in {} ms", rev, removed,
               swept,
               std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  return true;
}

}  // namespace etcdq::mvcc
