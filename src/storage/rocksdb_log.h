// Inside storage/ only: where RocksDB's own log lines go.
//
// Not to RocksDB's LOG file in the database directory: RocksDB 7.8 writes
// it through a WritableFileWriter (logging/env_logger.h) and ignores a
// failed append, so on a full disk its next log line appends to a writer
// that has failed, and Debian's librocksdb (built with assertions) aborts
// the process (`sync_without_flush_called_`, file/writable_file_writer.h).
// That is what killed a follower whose data dir filled (issue #36), before
// any write of ours failed. Its warnings and errors go to etcdq's log
// instead (spdlog, "rocksdb: ..."); its info lines are dropped, as the
// member logs what matters itself.
//
// Thread-safety: the logger may be called from any thread (RocksDB's).
#pragma once

#include <rocksdb/env.h>

#include <memory>

namespace etcdq::storage {

// For DBOptions::info_log, of every database storage/ opens.
std::shared_ptr<rocksdb::Logger> rocksdb_logger();

}  // namespace etcdq::storage
