#include "storage/engine.h"

#include <spdlog/spdlog.h>

#include "common/metrics.h"
#include "common/progress.h"

#include "storage/batch.h"
#include "storage/fail_stop.h"
#include "storage/rocksdb_log.h"

#include <chrono>

#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace etcdq::storage {
namespace {

// etcd's bbolt commit histogram (etcd's server/storage/backend/metrics.go):
// here the time of RocksDB's Write of one batch, which etcdq does without
// an fsync of its own (engine.h; the Raft log is the WAL, whose fsync is
// etcd_disk_wal_fsync_duration_seconds, consensus/metrics.h).
prometheus::Histogram& commit_seconds() {
  static prometheus::Histogram& h = metrics::histogram(
      "etcd_disk_backend_commit_duration_seconds", "The latency distributions of commit called by backend.",
      metrics::disk_seconds_buckets());
  return h;
}


constexpr uint64_t kMaxWalBytes = 96 << 20;

rocksdb::ColumnFamilyOptions cf_options(Cf c, const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions o;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = cache;
  // Point lookups dominate on `latest` (put, compare) and on `history` seeks.
  if (c == Cf::kLatest || c == Cf::kHistory) {
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  }
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  o.compression = rocksdb::kLZ4Compression;
  o.write_buffer_size = 64 << 20;
  if (c == Cf::kLatest) {
    // A bloom filter over the memtable's keys: most puts write a key the
    // memtable does not hold (a new key, or one last written before the
    // last flush), and their read of its live version then skips the
    // memtable's skip list. Queue load delivered 8% more with it
    // (bench/RESULTS.md, "Apply: unindexed history").
    o.memtable_prefix_bloom_size_ratio = 0.02;
    o.memtable_whole_key_filtering = true;
  }
  return o;
}

}  // namespace

Error Engine::open(const std::string& dir, std::unique_ptr<Engine>* out) {
  commit_seconds();  // shown at 0 from the start, as etcd's
  auto cache = rocksdb::NewLRUCache(256 << 20);
  rocksdb::DBOptions opts;
  opts.create_if_missing = true;
  opts.create_missing_column_families = true;
  opts.max_background_jobs = 2;
  opts.bytes_per_sync = 1 << 20;
  // RocksDB keeps a write-ahead log file until every column family with
  // data in it has flushed. `meta` (the applied index, a few bytes per
  // entry) never fills its memtable, so without a cap every log file stayed
  // until the total reached RocksDB's default (4x all write buffers, about
  // 1 GiB here): after 1M puts, 640 MiB of logs beside 120 MiB of tables.
  // Past the cap RocksDB flushes the column families that hold the oldest
  // log back, so the logs stay within it.
  opts.max_total_wal_size = kMaxWalBytes;
  // A start after a crash replays the log files into memtables and leaves
  // them there, flushed later as any memtable, instead of flushing every
  // column family before Open returns: a member killed under load took
  // seconds more to start (issue #36, catch-up). The log files stay until
  // that flush, so nothing is lost.
  opts.avoid_flush_during_recovery = true;
  // RocksDB's errors go to etcdq's log, never to a LOG file in the data
  // dir (storage/rocksdb_log.h: on a full disk it aborted).
  auto log = std::make_shared<RocksdbLog>();
  opts.info_log = log;
  // A failed write stops the database for good (storage/failure.h): no
  // automatic resume after a retryable I/O error either (the listener turns
  // off the one from a full disk).
  opts.max_bgerror_resume_count = 0;
  auto fail_stop = std::make_shared<FailStop>(dir);
  opts.listeners.push_back(FailStop::listener(fail_stop));

  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (int i = 0; i < kCfCount; ++i) {
    cfs.emplace_back(kCfNames[i], cf_options(static_cast<Cf>(i), cache));
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(opts, dir, cfs, &handles, &raw);
  if (!s.ok()) {
    return errors::internal("cannot open the state database in " + dir + ": " + s.ToString());
  }
  std::unique_ptr<Engine> e(new Engine());
  e->dir_ = dir;
  e->fail_stop_ = std::move(fail_stop);
  e->db_.reset(raw);
  for (int i = 0; i < kCfCount; ++i) e->handles_[i] = handles[i];
  log->opened();
  *out = std::move(e);
  return {};
}

Engine::~Engine() {
  if (!db_) return;
  for (auto* h : handles_) {
    if (h) db_->DestroyColumnFamilyHandle(h);
  }
  db_->Close();
}

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ETCDQ_THREAD_SANITIZER 1
#endif
#endif

namespace {
Error write_batch(rocksdb::DB* db, FailStop& fail_stop, const std::string& dir, rocksdb::WriteBatch* batch) {
  if (Error e = fail_stop.error()) return e;
  std::shared_lock<std::shared_mutex> sync_lock(fail_stop.sync_mu());
  auto start = std::chrono::steady_clock::now();
  rocksdb::WriteOptions wo;
  wo.sync = false;
#ifdef ETCDQ_THREAD_SANITIZER
  // ThreadSanitizer build only: RocksDB lets one writer copy the batches of
  // the others that arrive meanwhile (its write group), ordered by atomics
  // in Debian's uninstrumented library that TSan cannot see, so it reported
  // apply's and the compactor's batches as racing. One writer at a time
  // keeps TSan's view exact; other builds keep RocksDB's group commit.
  static std::mutex tsan_one_writer;
  std::lock_guard<std::mutex> lock(tsan_one_writer);
#endif
  rocksdb::Status s = db->Write(wo, batch);
  commit_seconds().Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!s.ok()) {
    fail_stop.fail("write", s);
    return errors::internal("state database write failed in " + dir + ": " + s.ToString());
  }
  return {};
}
}  // namespace

Error Engine::write(Batch& batch) { return write_batch(db_.get(), *fail_stop_, dir_, &batch.batch_); }

Error Engine::write(IndexedBatch& batch) {
  std::unique_ptr<rocksdb::WriteBatch> merged;
  if (rocksdb::Status s = batch.merged(&merged); !s.ok()) {
    return errors::internal("state database batch failed in " + dir_ + ": " + s.ToString());
  }
  return write_batch(db_.get(), *fail_stop_, dir_, merged ? merged.get() : batch.batch_.GetWriteBatch());
}

namespace {
// The files of the database dir now (size_bytes() may answer from its cache).
uint64_t defrag_dir_bytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code fec;
    if (f.is_regular_file(fec)) total += f.file_size(fec);
  }
  return total;
}
}  // namespace

Error Engine::compact_all() {
  if (Error e = fail_stop_->error()) return e;
  // Start, progress at most once a second (common/progress.h: bytes of the
  // column families done of all of them, also while one long column family
  // compacts) and end with the sizes and the time: etcd logs
  // "defragmenting" and "finished defragmenting directory" with sizes and
  // "took" (backend.Defrag).
  common::ProgressPacer pacer;
  const uint64_t before = defrag_dir_bytes(dir_);
  // The memtables first (CompactRange would flush them itself), so that the
  // column families' table files hold everything the progress counts.
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (rocksdb::Status s = db_->Flush(flush, {handles_.begin(), handles_.end()}); !s.ok()) {
    spdlog::warn("defragmenting {}: flush before it failed: {}", dir_, s.ToString());
  }
  std::vector<uint64_t> cf_bytes(handles_.size(), 0);
  uint64_t total = 0;
  for (size_t i = 0; i < handles_.size(); ++i) {
    uint64_t v = 0;
    if (db_->GetIntProperty(handles_[i], "rocksdb.total-sst-files-size", &v)) cf_bytes[i] = v;
    total += cf_bytes[i];
  }
  spdlog::info("defragmenting {}: {} bytes in {} column families", dir_, before, handles_.size());
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  uint64_t done_bytes = 0;  // guarded by mu, as the two below
  size_t done = 0;
  std::string current;
  // CompactRange of one column family is one call: the progress of a long
  // one comes from here.
  std::thread reporter([&] {
    std::unique_lock<std::mutex> lock(mu);
    const auto step = std::max<std::chrono::milliseconds>(common::progress_interval(), std::chrono::milliseconds(1));
    do {
      if (!pacer.due()) continue;
      spdlog::info("defragmenting {}: {} of {} bytes done ({} of {} column families; compacting {}), {} ms", dir_,
                   done_bytes, total, done, handles_.size(), current, pacer.elapsed_ms());
    } while (!cv.wait_for(lock, step, [&] { return finished; }));
  });
  rocksdb::CompactRangeOptions o;
  Error e;
  for (size_t i = 0; i < handles_.size(); ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      current = handles_[i]->GetName();
    }
    rocksdb::Status s = db_->CompactRange(o, handles_[i], nullptr, nullptr);
    if (!s.ok()) e = errors::internal("defragment failed: " + s.ToString());
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    done_bytes += cf_bytes[i];
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    finished = true;
  }
  cv.notify_all();
  reporter.join();
  const uint64_t after = defrag_dir_bytes(dir_);
  const int64_t ms = pacer.elapsed_ms();
  if (e) {
    spdlog::warn("defragmenting {} failed after {} ms: {}", dir_, ms, e.message());
  } else {
    spdlog::info("finished defragmenting {}: {} bytes before, {} after, took {} ms", dir_, before, after, ms);
  }
  return e;
}

void Engine::flush_in_background_over(uint64_t bytes) {
  if (fail_stop_->error()) return;
  uint64_t in_memtables = 0;
  if (!db_->GetAggregatedIntProperty("rocksdb.cur-size-all-mem-tables", &in_memtables) || in_memtables <= bytes) {
    return;
  }
  rocksdb::FlushOptions flush;
  flush.wait = false;
  flush.allow_write_stall = true;  // never block the caller (the consensus thread)
  if (rocksdb::Status s = db_->Flush(flush, {handles_.begin(), handles_.end()}); !s.ok()) {
    spdlog::warn("cannot start a flush of {}: {}", dir_, s.ToString());
  }
}

Error Engine::sync_wal() {
  FailStop& fail_stop = *fail_stop_;
  std::unique_lock<std::shared_mutex> sync_lock(fail_stop.sync_mu());
  // After a failed write RocksDB's WAL writer may have failed too: syncing
  // it would abort (storage/failure.h).
  if (Error e = fail_stop.error()) return e;
  rocksdb::Status s = db_->FlushWAL(/*sync=*/true);
  if (!s.ok()) {
    fail_stop.fail("WAL sync", s);
    return errors::internal("state database sync failed in " + dir_ + ": " + s.ToString());
  }
  return {};
}

int64_t Engine::size_bytes() const {
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  int64_t cached = size_cache_.load(std::memory_order_relaxed);
  if (cached != 0 && now - size_measured_ns_.load(std::memory_order_relaxed) < kSizeRefreshNs) return cached;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir_, ec)) {
    std::error_code fec;
    if (f.is_regular_file(fec)) total += f.file_size(fec);
  }
  int64_t size = total > 4096 ? static_cast<int64_t>(total) : 4096;
  size_cache_.store(size, std::memory_order_relaxed);
  size_measured_ns_.store(now, std::memory_order_relaxed);
  return size;
}

int64_t Engine::in_use_bytes() const {
  uint64_t total = 0;
  for (auto* h : handles_) {
    uint64_t v = 0;
    if (db_->GetIntProperty(h, "rocksdb.estimate-live-data-size", &v)) total += v;
    if (db_->GetIntProperty(h, "rocksdb.cur-size-all-mem-tables", &v)) total += v;
  }
  int64_t in_use = total > 4096 ? static_cast<int64_t>(total) : 4096;
  return std::min(in_use, size_bytes());
}

}  // namespace etcdq::storage
