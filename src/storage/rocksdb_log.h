// Inside storage/ only: where RocksDB's own log lines go.
//
// Not to RocksDB's LOG file in the database directory: RocksDB 7.8 writes
// it through a WritableFileWriter (logging/env_logger.h) and ignores a
// failed append, so on a full disk its next log line appends to a writer
// that has failed, and Debian's librocksdb (built with assertions) aborts
// the process (`sync_without_flush_called_`, file/writable_file_writer.h).
// That is the abort seen when a member's data dir filled (issue #36): with
// every write of ours already failing cleanly, members still aborted that
// way until the LOG went elsewhere (bench/RESULTS.md, "A member's disk
// fills"). Its errors go to etcdq's log instead, as
// warnings ("rocksdb: ..."); the rest is dropped, as the member logs what
// matters itself.
//
// Thread-safety: the logger may be called from any thread (RocksDB's).
#pragma once

#include <rocksdb/env.h>

#include <atomic>
#include <cstdarg>
#include <memory>

namespace etcdq::storage {

// For DBOptions::info_log, one for each database storage/ opens. Quiet
// until opened() is called: RocksDB's summary of the directory at open logs
// "Error when reading ... dir" for a database it is about to create (its
// real errors at open come back as DB::Open's status, which the caller
// reports).
class RocksdbLog : public rocksdb::Logger {
 public:
  // Errors only: its warnings and info lines would fill the member's log.
  RocksdbLog() : rocksdb::Logger(rocksdb::InfoLogLevel::ERROR_LEVEL) {}
  void opened() { opened_.store(true, std::memory_order_release); }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override;

 private:
  std::atomic<bool> opened_{false};
};

}  // namespace etcdq::storage
