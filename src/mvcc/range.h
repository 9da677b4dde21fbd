// Reading keys at a revision, as etcd's mvcc rangeKeys
// (server/mvcc/kvstore_txn.go): which keys are live at `rev`, in key order.
#pragma once

#include <cstdint>
#include <string_view>
#include <string>
#include <vector>

#include "common/error.h"
#include "etcd/api/mvccpb/kv.pb.h"
#include "mvcc/reader.h"

namespace etcdq::mvcc {

struct RangeOptions {
  int64_t limit = 0;        // <= 0: no limit
  int64_t rev = 0;          // <= 0: the current revision
  bool count_only = false;  // fill only `count`
};

struct RangeResult {
  std::vector<mvccpb::KeyValue> kvs;  // key order, at most `limit`
  int64_t count = 0;                  // all keys in the range at `rev`, ignoring limit
  int64_t rev = 0;                    // the current revision (etcd answers with it, not `rev`)
};

// `end`: empty = the single key `key`; "\0" = every key >= `key`; otherwise
// the half-open range [key, end) (end <= key gives nothing, as etcd).
// Errors: future_rev() when opts.rev > current_rev; compacted() when
// 0 < opts.rev < compact_rev. Counts in etcd_mvcc_range_total (metrics.h).
Error range(const Reader& reader, std::string_view key, std::string_view end,
            const RangeOptions& opts, int64_t current_rev, int64_t compact_rev, RangeResult* out);
// The same, uncounted: a lookup that is part of another operation (the
// keys a delete-range removes), which etcd does not count as a range.
Error range_uncounted(const Reader& reader, std::string_view key, std::string_view end,
                      const RangeOptions& opts, int64_t current_rev, int64_t compact_rev, RangeResult* out);

// The keys attached to lease `id`, in key order.
std::vector<std::string> keys_of_lease(const Reader& reader, int64_t id);

// True when `k` lies in the range (key, end) as defined above.
bool in_range(std::string_view k, std::string_view key, std::string_view end);

}  // namespace etcdq::mvcc
