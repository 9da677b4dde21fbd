#include "storage/engine.h"

#include <spdlog/spdlog.h>

#include "common/metrics.h"
#include "common/progress.h"

#include "storage/batch.h"
#include "storage/fail_stop.h"
#include "storage/rocksdb_log.h"

#include <chrono>

#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace etcdq::storage {

// Durability::kReplayed bytes written, and how many of them a finished
// flush has put in table files (size_bytes()). Approximate by the writes
// that race a flush's start: RocksDB switches the memtables a moment before
// it reports the start (FlushMarks takes its mark then), and a write is
// counted a moment after it lands; either way the next flush settles it.
struct UnloggedBytes {
  std::atomic<uint64_t> written{0};
  std::atomic<uint64_t> begin_mark{0};
  std::atomic<uint64_t> flushed{0};
  std::atomic<bool> any{false};  // kReplayed writes since the database opened
  // `written` when a flush was last asked for (Engine::bound_unflushed).
  std::atomic<uint64_t> asked{0};

  uint64_t pending() const {
    uint64_t w = written.load(std::memory_order_relaxed), f = flushed.load(std::memory_order_relaxed);
    return w > f ? w - f : 0;
  }
};

namespace {

class FlushMarks : public rocksdb::EventListener {
 public:
  explicit FlushMarks(std::shared_ptr<UnloggedBytes> u) : u_(std::move(u)) {}
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override {
    u_->begin_mark.store(u_->written.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  void OnFlushCompleted(rocksdb::DB*, const rocksdb::FlushJobInfo&) override {
    uint64_t mark = u_->begin_mark.load(std::memory_order_relaxed);
    uint64_t f = u_->flushed.load(std::memory_order_relaxed);
    while (f < mark && !u_->flushed.compare_exchange_weak(f, mark, std::memory_order_relaxed)) {
    }
  }

 private:
  std::shared_ptr<UnloggedBytes> u_;
};

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

// Durability::kReplayed bytes the memtables may hold before a flush is
// asked for. What a member SIGKILLed holds unflushed it applies again from
// the Raft log before it serves; left to the 64 MiB memtables and the
// snapshots, a follower killed under load applied 1,700-2,900 entries
// again and served later than with RocksDB's log; with this bound, 200-1,200
// entries, sooner (bench/RESULTS.md, "Branch put3land").
constexpr uint64_t kMaxUnflushedBytes = 16 << 20;

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
  // Durability::kReplayed writes skip the WAL: every flush takes all column
  // families together, so the table files always hold one consistent state
  // (an applied index with everything up to it; engine.h).
  opts.atomic_flush = true;
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
  auto unlogged = std::make_shared<UnloggedBytes>();
  opts.listeners.push_back(std::make_shared<FlushMarks>(unlogged));

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
  e->unlogged_ = std::move(unlogged);
  e->db_.reset(raw);
  for (int i = 0; i < kCfCount; ++i) e->handles_[i] = handles[i];
  log->opened();
  *out = std::move(e);
  return {};
}

Engine::~Engine() {
  if (!db_) return;
  // A clean stop leaves nothing for the Raft log to replay (RocksDB's Close
  // would flush too; here a failure is logged).
  if (unlogged_->any.load(std::memory_order_relaxed) && !fail_stop_->failed()) {
    if (Error e = flush_memtables()) spdlog::warn("closing {}: {}", dir_, e.message());
  }
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
Error write_batch(rocksdb::DB* db, FailStop& fail_stop, const std::string& dir, rocksdb::WriteBatch* batch,
                  Durability d, UnloggedBytes& unlogged) {
  if (Error e = fail_stop.error()) return e;
  std::shared_lock<std::shared_mutex> sync_lock(fail_stop.sync_mu());
  auto start = std::chrono::steady_clock::now();
  rocksdb::WriteOptions wo;
  wo.sync = false;
  if (d == Durability::kReplayed) {
    wo.disableWAL = true;
    unlogged.any.store(true, std::memory_order_relaxed);
  }
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
  if (s.ok() && d == Durability::kReplayed) {
    unlogged.written.fetch_add(batch->GetDataSize(), std::memory_order_relaxed);
  }
  if (!s.ok()) {
    fail_stop.fail("write", s);
    return errors::internal("state database write failed in " + dir + ": " + s.ToString());
  }
  return {};
}
}  // namespace

Error Engine::write(Batch& batch, Durability d) {
  Error e = write_batch(db_.get(), *fail_stop_, dir_, &batch.batch_, d, *unlogged_);
  if (!e && d == Durability::kReplayed) bound_unflushed();
  return e;
}

Error Engine::write(IndexedBatch& batch, Durability d) {
  std::unique_ptr<rocksdb::WriteBatch> merged;
  if (rocksdb::Status s = batch.merged(&merged); !s.ok()) {
    return errors::internal("state database batch failed in " + dir_ + ": " + s.ToString());
  }
  Error e = write_batch(db_.get(), *fail_stop_, dir_, merged ? merged.get() : batch.batch_.GetWriteBatch(), d,
                        *unlogged_);
  if (!e && d == Durability::kReplayed) bound_unflushed();
  return e;
}

void Engine::bound_unflushed() {
  // A failed database is not flushed again (storage/failure.h).
  if (fail_stop_->failed()) return;
  UnloggedBytes& u = *unlogged_;
  uint64_t written = u.written.load(std::memory_order_relaxed);
  uint64_t asked = u.asked.load(std::memory_order_relaxed);
  uint64_t since = std::max(asked, u.flushed.load(std::memory_order_relaxed));
  if (written < since + kMaxUnflushedBytes) return;
  // One writer asks (apply's thread or the compactor's); the flush runs on
  // RocksDB's background threads. allow_write_stall: otherwise Flush waits
  // here, on the apply thread, until a flush would not stall writes.
  if (!u.asked.compare_exchange_strong(asked, written, std::memory_order_relaxed)) return;
  start_flush();
}

void Engine::start_flush() {
  if (fail_stop_->failed()) return;
  rocksdb::FlushOptions flush;
  flush.wait = false;
  flush.allow_write_stall = true;
  rocksdb::Status s = db_->Flush(flush, {handles_.begin(), handles_.end()});
  // A refused request loses nothing: the memtables still flush when full,
  // and make_durable() flushes and fails the database on an error.
  if (!s.ok()) spdlog::warn("state database flush not started in {}: {}", dir_, s.ToString());
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

Error Engine::make_durable() {
  FailStop& fail_stop = *fail_stop_;
  {
    std::unique_lock<std::shared_mutex> sync_lock(fail_stop.sync_mu());
    // After a failed write RocksDB's WAL writer may have failed too: syncing
    // it would abort (storage/failure.h).
    if (Error e = fail_stop.error()) return e;
    rocksdb::Status s = db_->FlushWAL(/*sync=*/true);
    if (!s.ok()) {
      fail_stop.fail("WAL sync", s);
      return errors::internal("state database sync failed in " + dir_ + ": " + s.ToString());
    }
  }
  if (!unlogged_->any.load(std::memory_order_relaxed)) return {};
  return flush_memtables();
}

Error Engine::flush_memtables() {
  // The memtables hold writes no log file has: flush them (all column
  // families together, atomic_flush). A flush of empty memtables does
  // nothing. Not under sync_mu: writes go on meanwhile, into new memtables.
  FailStop& fail_stop = *fail_stop_;
  if (Error e = fail_stop.error()) return e;
  rocksdb::FlushOptions flush;
  flush.wait = true;
  rocksdb::Status s = db_->Flush(flush, {handles_.begin(), handles_.end()});
  if (!s.ok()) {
    fail_stop.fail("flush", s);
    return errors::internal("state database flush failed in " + dir_ + ": " + s.ToString());
  }
  return {};
}

int64_t Engine::size_bytes() const {
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  int64_t cached = size_cache_.load(std::memory_order_relaxed);
  int64_t measured = size_measured_ns_.load(std::memory_order_relaxed);
  if (cached != 0 && now - measured < kSizeRefreshNs) return cached;
  // One caller lists the directory; the others answer from the cache
  // meanwhile (at full write speed every gRPC thread's put found it
  // expired at once and listed it too).
  if (cached != 0 && !size_measured_ns_.compare_exchange_strong(measured, now, std::memory_order_relaxed)) {
    return cached;
  }
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir_, ec)) {
    std::error_code fec;
    if (f.is_regular_file(fec)) total += f.file_size(fec);
  }
  total += unlogged_->pending();
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
