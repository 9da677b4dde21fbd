#include "storage/bulk_load.h"

#include <rocksdb/sst_file_writer.h>

#include <algorithm>
#include <filesystem>

#include "storage/fail_stop.h"

namespace etcdq::storage {
namespace fs = std::filesystem;
namespace {
// A new table file past this many bytes of pairs: bounded files, each
// ingested whole.
constexpr uint64_t kBulkFileBytes = 256 << 20;
// The file system's free space is checked at each new file and after each
// this many bytes of pairs.
constexpr uint64_t kBulkSpaceCheckBytes = 16 << 20;

// Free space the files may not take (BulkLoad::kKeepFree's rule).
uint64_t bulk_keep_free(const fs::space_info& s) {
  return std::max<uint64_t>(BulkLoad::kKeepFreeMin, s.capacity / 100 * BulkLoad::kKeepFreePercent);
}
}  // namespace

BulkLoad::BulkLoad(Engine* engine)
    : engine_(engine),
      dir_(engine->dir() + ".bulk-load"),
      writers_(kCfCount),
      file_bytes_(kCfCount),
      files_(kCfCount) {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_, ec);
}

BulkLoad::~BulkLoad() {
  writers_.clear();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

Error BulkLoad::finish_file(int cf) {
  if (!writers_[cf]) return {};
  rocksdb::Status s = writers_[cf]->Finish();
  writers_[cf].reset();
  file_bytes_[cf] = 0;
  if (!s.ok()) return errors::internal("writing a table file in " + dir_ + ": " + s.ToString());
  return {};
}

Error BulkLoad::add(Cf cf, std::string_view key, std::string_view value) {
  const int c = static_cast<int>(cf);
  if (c < 0 || c >= kCfCount) return errors::internal("bulk load: no column family " + std::to_string(c));
  auto& writer = writers_[c];
  if (!writer || file_bytes_[c] >= kBulkFileBytes || since_space_check_ >= kBulkSpaceCheckBytes) {
    since_space_check_ = 0;
    std::error_code ec;
    const fs::space_info s = fs::space(dir_, ec);
    if (!ec && s.available < bulk_keep_free(s)) {
      return errors::internal("the state being staged in " + dir_ + " leaves " + std::to_string(s.available) +
                              " bytes free on its file system, below the " + std::to_string(bulk_keep_free(s)) +
                              " kept free: it does not fit");
    }
  }
  if (!writer || file_bytes_[c] >= kBulkFileBytes) {
    if (Error e = finish_file(c)) return e;
    rocksdb::Options o(engine_->db()->GetDBOptions(), engine_->db()->GetOptions(engine_->cf(cf)));
    writer = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), o, engine_->cf(cf));
    std::string path = dir_ + "/" + std::to_string(c) + "-" + std::to_string(files_[c].size()) + ".sst";
    if (rocksdb::Status s = writer->Open(path); !s.ok()) {
      writer.reset();
      return errors::internal("cannot create " + path + ": " + s.ToString());
    }
    files_[c].push_back(path);
  }
  // Keys out of order are refused here (SstFileWriter::Put).
  rocksdb::Status s = writer->Put(to_slice(key), to_slice(value));
  if (!s.ok()) return errors::internal("bulk load: " + s.ToString());
  file_bytes_[c] += key.size() + value.size();
  since_space_check_ += key.size() + value.size();
  return {};
}

Error BulkLoad::ingest() {
  for (int c = 0; c < kCfCount; ++c) {
    if (Error e = finish_file(c)) return e;
  }
  if (Error e = engine_->fail_stop().error()) return e;
  // Every column family in one call: atomic (all or none), and one write of
  // RocksDB's MANIFEST, where a call a family wrote and synced it for each.
  std::vector<rocksdb::IngestExternalFileArg> args;
  for (int c = 0; c < kCfCount; ++c) {
    if (files_[c].empty()) continue;
    rocksdb::IngestExternalFileArg a;
    a.column_family = engine_->cf(static_cast<Cf>(c));
    a.external_files = files_[c];
    a.options.move_files = true;  // hard links: the files are ours, on the same file system
    args.push_back(std::move(a));
  }
  if (args.empty()) return {};
  rocksdb::Status s = engine_->db()->IngestExternalFiles(args);
  if (!s.ok()) return errors::internal("cannot ingest the state into " + engine_->dir() + ": " + s.ToString());
  return {};
}

}  // namespace etcdq::storage
