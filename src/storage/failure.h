// What the state database does when a write to its disk fails (a full disk,
// an I/O error), and what the process is told.
//
// A RocksDB database whose write, flush, WAL sync or compaction failed is
// not written to again: every later Engine::write, make_durable,
// compact_all and BulkLoad::ingest returns the first failure without reaching RocksDB,
// and RocksDB's own recovery is off. Why: Debian's librocksdb 7.8 is built
// with assertions, and an append, flush or sync on a file writer that has
// failed aborts the process (`sync_without_flush_called_`,
// file/writable_file_writer.h) instead of returning an error; RocksDB's
// recovery from a full disk (its SstFileManager polling for free space,
// then flushing and resuming) and a WAL sync racing a failed append both
// go back to such writers. (Its LOG file did too: storage/rocksdb_log.h.)
// Nothing is lost by refusing instead: the Raft log is the write-ahead log
// (DESIGN.md, "Write path"), so a restarted member re-applies whatever
// RocksDB had not made durable.
//
// The first failure of each database is also handed, once, to the handler
// set here, on the thread that met it (a RocksDB background thread for a
// flush or compaction). A member stops there, as etcd 3.6 does on a failed
// backend commit ("failed to commit tx", backend/batch_tx.go, lg.Fatal) or
// WAL save ("failed to save Raft hard state and entries", etcdserver/raft.go):
// member.cc logs the reason and exits 70. Offline tools (snapshot restore)
// set none and get the error back.
//
// Thread-safety: set the handler before opening any Engine; it is then
// called from any thread, at most once per database.
#pragma once

#include <functional>
#include <string>

namespace etcdq::storage {

// `reason` names the database's directory, what failed and RocksDB's
// status, e.g. "the state database in D failed (write): IO error: No space
// left on device: While appending to file: D/000012.log: No space left on
// device".
using FailureHandler = std::function<void(const std::string& reason)>;
void on_failure(FailureHandler fn);

}  // namespace etcdq::storage
