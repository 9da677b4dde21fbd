// Writing a whole state into the database at once, as RocksDB's table files
// ingested whole (SstFileWriter + IngestExternalFile), not as writes: no
// WAL, no memtable. What a snapshot install does (apply/restore.cc): it
// went through 4 MiB write batches before, and its consensus thread spent
// its time inserting into the memtable's skip list (perf; an install of
// 50-75 MB took 1.4-2.7 s on a loaded 2-core host, issue #36).
//
// Pairs must come in key order (bytewise) within each column family, each
// key once; column families may interleave (an installer writes latest
// pairs while it reads history: mvcc/derive.h). They are
// written to table files in a directory of their own beside the database,
// and ingest() moves those into it, each column family's newer than
// anything the database holds (so they win over range deletions written
// before). Until ingest() the database is unchanged; the files are removed
// when the loader goes, ingested or not.
//
// Thread-safety: one thread; the database may be read and written
// meanwhile.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "storage/engine.h"

namespace rocksdb {
class SstFileWriter;
}

namespace etcdq::storage {

class BulkLoad {
 public:
  // Files go to <engine dir>.bulk-load (created; emptied first).
  explicit BulkLoad(Engine* engine);
  ~BulkLoad();
  BulkLoad(const BulkLoad&) = delete;
  BulkLoad& operator=(const BulkLoad&) = delete;

  // Adds one pair. Errors: a key out of order in its column family
  // (errors::internal), RocksDB's file errors, and a file system whose
  // free space fell below kKeepFree (errors::internal, "it does not fit").
  Error add(Cf cf, std::string_view key, std::string_view value);

  // The files stop short of filling the file system: at least
  // kKeepFreePercent of it or kKeepFreeMin, whichever is more, stays free
  // (checked at each new file and every 16 MiB of pairs). The state comes
  // from a peer, whose pairs are uncompressed and unbounded: without it, a
  // peer that sent valid pairs without end filled the data dir's disk,
  // and the member's Raft log and RocksDB with it (issue #36). A real state
  // that does not fit beside this margin could not be run here anyway.
  static constexpr uint64_t kKeepFreePercent = 2;
  static constexpr uint64_t kKeepFreeMin = 32 << 20;
  // Ingests every pair added. Errors: RocksDB's (the database fails as on
  // any failed write: storage/failure.h).
  Error ingest();

 private:
  Error finish_file(int cf);
  Engine* engine_;
  std::string dir_;
  // By column family: the table file being written, its bytes so far, and
  // the files written.
  std::vector<std::unique_ptr<rocksdb::SstFileWriter>> writers_;
  std::vector<uint64_t> file_bytes_;
  std::vector<std::vector<std::string>> files_;
  uint64_t since_space_check_ = 0;  // bytes of pairs since the free space was checked
};

}  // namespace etcdq::storage
