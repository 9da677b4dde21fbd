// etcd's snapshot file: a bbolt database followed by the sha256 of the
// database bytes (32 bytes). etcd's Maintenance.Snapshot stream ends with
// that hash and etcdctl keeps it in the file; `etcdctl snapshot restore`
// (etcd 3.4 clientv3/snapshot/v3_snapshot.go, saveDB) knows a file has the
// trailer when its size % 512 == 32 (a bbolt file is whole pages), checks
// it, and refuses a file without one unless --skip-hash-check.
//
// Thread-safety: free functions, no shared state. Memory: a 1 MiB buffer.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"

namespace etcdq::bbolt {

inline constexpr uint64_t kSha256Bytes = 32;

// Appends the sha256 of the whole file at `path` to it (fsyncs).
// Internal on an I/O error.
Error append_sha256_trailer(const std::string& path);

// Checks the trailer of the snapshot at `path` and sets *db_bytes to the
// length of the database before it. DataLoss when the file has no trailer
// ("snapshot missing hash") or the hash differs ("sha256 mismatch"),
// message naming the file; Internal on an I/O error.
Error check_sha256_trailer(const std::string& path, uint64_t* db_bytes);

}  // namespace etcdq::bbolt
