#include "storage/checkpoints.h"

#include <rocksdb/utilities/checkpoint.h>

#include "storage/fail_stop.h"
#include "storage/rocksdb_log.h"

#include <algorithm>
#include <filesystem>
#include <vector>

namespace etcdq::storage {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPrefix = "snap-";

std::vector<uint64_t> kept_indexes(const std::string& root) {
  std::vector<uint64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (!name.starts_with(kPrefix) || name.ends_with(".tmp")) continue;
    try {
      out.push_back(std::stoull(name.substr(kPrefix.size()), nullptr, 16));
    } catch (...) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Checkpoints::Checkpoints(std::string root) : root_(std::move(root)) {}

std::string Checkpoints::dir_of(uint64_t index) const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(index));
  return (fs::path(root_) / (std::string(kPrefix) + buf)).string();
}

Error Checkpoints::take(Engine* engine, uint64_t index) {
  // A database that failed a write is not flushed again (storage/failure.h).
  if (Error e = engine->fail_stop().error()) return e;
  std::error_code ec;
  fs::create_directories(root_, ec);
  std::string dir = dir_of(index);
  std::string tmp = dir + ".tmp";
  fs::remove_all(tmp, ec);
  if (fs::exists(dir, ec)) return {};  // already taken (a restart re-snapshots the same index)
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(engine->db(), &raw);
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  // log_size_for_flush 0: flush memtables, so the checkpoint needs no WAL.
  if (s.ok()) s = cp->CreateCheckpoint(tmp, /*log_size_for_flush=*/0);
  if (!s.ok()) {
    // A full disk: what was written of it would only keep the disk full.
    // (A failed flush of the live database also failed the database:
    // fail_stop.h's listener heard of it.)
    fs::remove_all(tmp, ec);
    return errors::internal("cannot checkpoint the state database into " + tmp + ": " + s.ToString());
  }
  std::lock_guard<std::mutex> lock(mu_);
  fs::rename(tmp, dir, ec);
  if (ec) return errors::internal("cannot rename checkpoint " + tmp + ": " + ec.message());
  auto kept = kept_indexes(root_);
  for (size_t i = 0; i + kKept < kept.size(); ++i) fs::remove_all(dir_of(kept[i]), ec);
  return {};
}

uint64_t Checkpoints::newest() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto kept = kept_indexes(root_);
  return kept.empty() ? 0 : kept.back();
}

Error Checkpoints::read(uint64_t min_index, const Visitor& fn) const {
  std::string dir;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (int i = 0; i < kCfCount; ++i) cfs.emplace_back(kCfNames[i], rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  {
    // Open under the lock: take() must not delete it while RocksDB opens
    // its files; once open, the files stay readable even if unlinked.
    std::lock_guard<std::mutex> lock(mu_);
    auto kept = kept_indexes(root_);
    if (kept.empty() || kept.back() < min_index) {
      return errors::internal("no checkpoint at index " + std::to_string(min_index) + " or later");
    }
    dir = dir_of(kept.back());
    rocksdb::DBOptions opts;
    opts.info_log = std::make_shared<RocksdbLog>();  // no LOG file written into the checkpoint (rocksdb_log.h)
    opts.max_open_files = -1;  // keep every SST open: they may be unlinked meanwhile
    s = rocksdb::DB::OpenForReadOnly(opts, dir, cfs, &handles, &raw);
  }
  if (!s.ok()) return errors::internal("cannot open checkpoint " + dir + ": " + s.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  Error result;
  for (int i = 0; i < kCfCount && !result; ++i) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[i]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      result = fn(static_cast<Cf>(i), std::string_view(it->key().data(), it->key().size()),
                  std::string_view(it->value().data(), it->value().size()));
      if (result) break;
    }
    if (!result && !it->status().ok()) result = errors::internal("reading checkpoint " + dir + ": " + it->status().ToString());
  }
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  db->Close();
  return result;
}

}  // namespace etcdq::storage
