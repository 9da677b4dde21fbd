// The queue records (queue/book.h) rebuilt from the message keys of a
// data dir that has keys only: one restored from an etcd snapshot file
// (etcd_snapshot/restore.h), whether etcd or etcdq saved it. A snapshot file
// carries etcd's buckets, not the book's records, and without them a
// restored message is a plain key no consumer gets, and the queue's next
// produce reuses idx 1.
//
// For each queue with message keys (/q/{queue}/{idx}/{tail} in the latest
// table): one record per message, produced at `now_ms` and never
// delivered; counters with next_idx past the highest idx, depth and
// produced the number of messages, cursor 0 (every message is delivered
// again, first deliveries in idx order: at least once). A /q/{queue}/config
// key gives the queue its settings record. The restore is marked
// (restore_base_key(), queue/book.h) so that ch: queues never use an idx
// again that the history after the backup may have put into ClickHouse.
// Plain keys elsewhere, and under /q/ in no queue form, are left alone; so
// is a second key at one idx (only keys written to etcd by hand can have
// that), which stays a plain key.
//
// Memory: streams the /q/ keys; one small counters record per queue.
// Errors: Internal for a storage error. Thread-safety: one caller, before
// the engine is shared (no member runs on it yet).
#pragma once

#include <cstdint>

#include "common/error.h"
#include "storage/engine.h"

namespace etcdq::queue {

struct RebuildStats {
  int64_t queues = 0;
  int64_t messages = 0;
};

Error rebuild_records(storage::Engine* engine, int64_t now_ms, RebuildStats* stats);

}  // namespace etcdq::queue
