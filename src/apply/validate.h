// Checks a client request before it is proposed, as etcd's v3rpc/key.go
// does (checkRangeRequest, checkPutRequest, checkTxnRequest, checkIntervals):
// a request that fails here is never proposed and changes nothing.
// Pure functions; any thread.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"

namespace etcdq::apply {

Error validate_range(const etcdserverpb::RangeRequest& r);
// Includes the rules of the key-space plug-ins for the keys they own
// (keyspace/registry.h, validate_put).
Error validate_put(const etcdserverpb::PutRequest& r);
Error validate_delete_range(const etcdserverpb::DeleteRangeRequest& r);
// `max_txn_ops`: --max-txn-ops (etcd default 128). Errors: too_many_ops(),
// empty_key(), value_provided(), lease_provided(), duplicate_key().
Error validate_txn(const etcdserverpb::TxnRequest& r, int64_t max_txn_ops);

// Messages nested in one request or command, at most: a txn nests two a
// level (RequestOp, TxnRequest), so about 2000 nested txns fit. Parsing,
// validating and applying recurse once a level; 4096 levels stay far below
// a thread's 8 MiB stack. Deeper requests are refused before they are parsed
// (server/request_parsing.h).
inline constexpr int kMaxRequestNesting = 4096;

// True when no op on any branch writes (etcd serves such txns as reads).
bool txn_is_read_only(const etcdserverpb::TxnRequest& r);
// Whether a Txn may add data: a Put in either branch, nested Txns
// included. etcd's quota charges a Txn only for its Puts
// (server/storage/quota.go, costTxn), so a delete-only Txn is let through
// a NOSPACE alarm, as Kubernetes' guarded deletes need.
bool txn_has_put(const etcdserverpb::TxnRequest& r);

}  // namespace etcdq::apply
