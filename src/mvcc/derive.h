// The latest and revlog column families rebuilt from history (codec.h).
//
// Both follow from history alone: a key's newest history record, if a put,
// is its latest record (writer.cc writes the same bytes to both), and every
// history record at or above the finished compaction has a revlog entry
// (compactor.cc removes the entries below it; etcd_snapshot/restore.cc
// rebuilds them the same way from an etcd snapshot). So an installer takes
// the meta and history column families from the sender and rebuilds the
// other two (apply/restore.cc): the transfer carries each value once, as
// etcd's snapshot (its bbolt `key` bucket) does, where it carried it twice.
//
// A history key sent by a peer is checked: one that does not decode, a
// record that is neither a put nor a tombstone, or two records at one
// revision are errors::internal and the install fails.
//
// Thread-safety: none (one install's thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "mvcc/codec.h"
#include "storage/engine.h"

namespace etcdq::mvcc {

class HistoryDeriver {
 public:
  // Where the rebuilt pairs go: latest ones in key order while history is
  // added, revlog ones in revision order from finish().
  using Emit = std::function<Error(storage::Cf cf, std::string_view key, std::string_view value)>;

  // `revlog_from`: the finished compaction's revision (kMetaCompactFinished;
  // -1 when none), below which no revlog entry is kept.
  HistoryDeriver(int64_t revlog_from, Emit emit) : revlog_from_(revlog_from), emit_(std::move(emit)) {}

  // One history pair, in history key order (user key, then newest first).
  Error add(std::string_view history_key, std::string_view record);
  // Emits the revlog pairs, in revision order. Call once, after the last add.
  Error finish();
  // Keys alive (the latest pairs emitted).
  int64_t live_keys() const { return live_keys_; }

 private:
  struct Change {
    Revision rev;
    uint64_t key_at;  // in keys_ (one copy per key: its changes share it)
    uint32_t key_len;
    char type;
  };
  int64_t revlog_from_;
  Emit emit_;
  std::string user_key_;      // the key of the last history pair
  bool have_key_ = false;
  bool key_kept_ = false;     // user_key_ is the last key in keys_
  std::string scratch_;
  int64_t live_keys_ = 0;
  std::string keys_;          // the user keys of changes_, back to back
  std::vector<Change> changes_;
};

}  // namespace etcdq::mvcc
