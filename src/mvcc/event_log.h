// Reading history as watch events: the revlog in revision order, each
// change resolved to its key-value (and the version before it) from the
// history column family.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "etcd/api/mvccpb/kv.pb.h"
#include "mvcc/reader.h"

namespace etcdq::mvcc {

// Appends the events of revisions [from, to] to `out`, in order, for the
// keys `want(key)` accepts. Stops at a revision boundary once `max_events`
// revlog entries were read, and before a revision whose events would take
// the appended ones past `max_bytes` (their size as the `events` field of
// a WatchResponse: tag, length and the event with its prev_kv), so a
// watch stream that has that much room takes them; the first revision is
// always appended whole, whatever its size. Returns the last revision
// appended completely (from - 1 if none). prev_kv is filled when
// `with_prev`, the key had a live version before, and that version is not
// compacted: the event's revision - 1 >= `compact_revision`. etcd reads it
// with a Range at mod_revision - 1 (v3rpc/watch.go, sendLoop), which fails
// below the compaction, so it sends no prev_kv there; the background
// compactor may not have removed that version yet, but it is gone all the
// same.
int64_t read_events(const Reader& r, int64_t from, int64_t to, size_t max_events, bool with_prev,
                    int64_t compact_revision, const std::function<bool(std::string_view key)>& want,
                    std::vector<mvccpb::Event>* out, size_t max_bytes = SIZE_MAX);

}  // namespace etcdq::mvcc
