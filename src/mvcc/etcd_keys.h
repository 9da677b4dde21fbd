// The store as etcd 3.4's `key` bucket holds it, and etcd's HashKV over it.
//
// etcd's bucket (mvcc/revision.go, kvstore_txn.go): key = main revision
// (8 bytes big-endian), '_', sub revision (8 bytes BE), plus 't' for a
// tombstone; value = the marshalled mvccpb.KeyValue (a tombstone's holds
// only the key). After a compaction at C it keeps every revision above C
// and, of the revisions at or below C, only each key's newest one at C when
// that is a put (mvcc/key_index.go compact/doCompact: a tombstone at or
// below C goes). Our history may still hold more below C (physical
// compaction runs in the background, compactor.h): this filter makes the
// result independent of that progress, so it is equal on every member.
//
// Memory: the revisions kept at C are found key by key and must be handed
// out in revision order, so one (revision, key) pair per key live at C is
// held and sorted (about 56 bytes plus the key each; nothing when C = 0).
// Values are read one at a time.
//
// Thread-safety: functions over an immutable ReadView; any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "mvcc/codec.h"
#include "mvcc/store.h"

namespace etcdq::mvcc {

// 17 bytes, or 18 with the tombstone mark.
std::string etcd_revision_key(Revision rev, bool tombstone);

struct EtcdRevision {
  Revision rev;
  bool tombstone = false;
  std::string_view user_key;
  std::string_view bucket_key;  // etcd_revision_key(rev, tombstone)
  std::string_view value;       // marshalled mvccpb.KeyValue
  // Of a revision at or below the compact revision: whether it is still the
  // key's newest at `upto` (etcd's kvindex.Keep(upto) holds it).
  bool kept_at_upto = true;
};

// Calls `fn` for every revision etcd's `key` bucket would hold, up to and
// including main revision `upto`, in the bucket's (revision) order. Stops at
// fn's first error and returns it; Internal if a record does not decode.
Error for_each_etcd_revision(const ReadView& view, int64_t upto, const std::function<Error(const EtcdRevision&)>& fn);

// etcd 3.4's HashKV (mvcc/kvstore.go HashByRev): CRC-32C seeded with "key",
// then bucket key and value of every revision up to `rev`; of those at or
// below the compact revision only the ones kvindex.Keep(rev) holds, unless
// no key is live at `rev` (etcd skips the filter when Keep is empty).
// `rev` <= 0: the current revision. Errors: compacted() when 0 < rev <=
// compact revision (etcd refuses rev == compact revision too);
// future_rev() when rev > current.
Error etcd_hash_kv(const ReadView& view, int64_t rev, uint32_t* hash);

}  // namespace etcdq::mvcc
