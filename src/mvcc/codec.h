// Byte layouts of the MVCC column families (storage/engine.h). All integers
// in keys are big-endian so RocksDB's bytewise order is numeric order.
//
//   latest:  user key                              -> value record
//   history: esc(user key) 00 01, ~main, ~sub      -> type byte + value record
//   revlog:  main, sub                             -> type byte + user key
//   meta:    names below                           -> little-endian int64
//
// esc() doubles every 00 byte as 00 FF, so esc(a) 00 01 sorts exactly as the
// user keys do and no key is a prefix-collision of another. Revisions are
// stored inverted in `history` so that a Seek to (key, R) lands on the newest
// version at or below R.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "etcd/api/mvccpb/kv.pb.h"

namespace etcdq::mvcc {

struct Revision {
  int64_t main = 0;
  int64_t sub = 0;
  auto operator<=>(const Revision&) const = default;
};

enum class RecordType : uint8_t { kPut = 'P', kDelete = 'D' };

// latest / history values: create, mod, version, lease (LE int64) then value.
void encode_record(const mvccpb::KeyValue& kv, std::string* out);
bool decode_record(std::string_view in, mvccpb::KeyValue* kv);  // kv->key untouched

std::string history_key(std::string_view user_key, Revision rev);
// Smallest history key of `user_key` (its newest version).
std::string history_key_first(std::string_view user_key);
// Smallest history key past every version of `user_key`.
std::string history_key_after(std::string_view user_key);
bool decode_history_key(std::string_view hkey, std::string* user_key, Revision* rev);

std::string revlog_key(Revision rev);
Revision decode_revlog_key(std::string_view rkey);

// meta column family: the lease table ("lease/" id -> TTL, owned by
// lease/lessor.h) and the lease -> key index ("lkey/" id key -> "").
std::string lease_table_key(int64_t id);
std::string lease_index_key(int64_t id, std::string_view user_key);
std::string lease_index_prefix(int64_t id);
inline constexpr std::string_view kLeaseTablePrefix = "lease/";

// meta column family keys
inline constexpr std::string_view kMetaAppliedIndex = "applied_index";
inline constexpr std::string_view kMetaRevision = "revision";
inline constexpr std::string_view kMetaCompactScheduled = "compact_scheduled";
inline constexpr std::string_view kMetaCompactFinished = "compact_finished";
// The last Raft log index whose entry did not build this member's state
// (consensus/fsm.h, Fsm::log_floor): written by etcd_snapshot's restore;
// local to the member, never sent with the state.
inline constexpr std::string_view kMetaLogFloor = "log_floor";
std::string encode_i64(int64_t v);
int64_t decode_i64(std::string_view s);

}  // namespace etcdq::mvcc
