// The latest column family rebuilt from history (codec.h).
//
// A key's newest history record, if a put, is its latest record (writer.cc
// writes the same bytes to both; a tombstone removes the key from latest),
// and history comes in user key order, newest first within a key. So an
// installer takes meta, history and revlog from the sender and rebuilds
// latest as history streams in, one key in memory at a time
// (apply/restore.cc): the transfer carries each value once, as etcd's
// snapshot (its bbolt `key` bucket) does, where it carried it twice.
// (revlog is sent rather than rebuilt: rebuilding it needs every change
// sorted by revision, in memory on a large uncompacted state.)
//
// A history pair sent by a peer is checked: a key that does not decode, a
// key not after the one before (bytewise: history's order), or a record
// that is neither a put nor a tombstone (or a put too short for its
// header) is errors::internal and the install fails.
//
// Thread-safety: none (one install's thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace etcdq::mvcc {

class LatestFromHistory {
 public:
  // Where each rebuilt latest pair goes, in key order: (user key, record).
  using Emit = std::function<Error(std::string_view key, std::string_view record)>;
  explicit LatestFromHistory(Emit emit) : emit_(std::move(emit)) {}

  // One history pair, in history key order (user key, then newest first).
  Error add(std::string_view history_key, std::string_view record);
  // Keys alive (the latest pairs emitted).
  int64_t live_keys() const { return live_keys_; }

 private:
  Emit emit_;
  std::string user_key_;  // the key of the last history pair
  std::string last_history_key_;  // the last history pair's whole key
  bool have_key_ = false;
  int64_t live_keys_ = 0;
  std::string scratch_;
};

}  // namespace etcdq::mvcc
