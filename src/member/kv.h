// The member's key-value calls as the KV service needs them, shaped like
// etcd's RaftKV (server/etcdserver/v3_server.go: Range, Put, DeleteRange,
// Txn, Compact): the request checks done before anything is proposed or
// read, the read-only Txn as a read, and Compact(physical=true)'s wait.
// Writes themselves go through the pipeline (member/answers.h, propose_for)
// and reads through the one read path (member/reads.h); permission checks
// of reads are member/auth.h's.
//
// Thread-safety: any thread. Errors: etcd's codes and exact messages
// (common/error.h).
#pragma once

#include <cstdint>
#include <functional>

#include "apply/validate.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "member/context.h"

namespace etcdq::member::kv {

// etcd's v3rpc/key.go checks, before a request is read or proposed (a
// request that fails changes nothing): checkRangeRequest, checkTxnRequest
// (at most ctx.limits.max_txn_ops ops a branch; errors::too_many_ops(),
// empty_key(), duplicate_key(), ...), checkDeleteRequest.
Error validate(const etcdserverpb::RangeRequest& r);
Error validate(const Context& ctx, const etcdserverpb::TxnRequest& r);
Error validate(const etcdserverpb::DeleteRangeRequest& r);

// True when no op on any branch writes: etcd serves such a Txn as a read
// (member/reads.h read_txn), not through the log.
bool is_read_only(const etcdserverpb::TxnRequest& r);

// Messages nested in one request, at most (apply/validate.h says why):
// the gRPC parse of a KV request refuses deeper ones.
inline constexpr int kMaxRequestNesting = apply::kMaxRequestNesting;

// Compact(physical=true): `done(OK)` once physical compaction has reached
// `revision` (at once on this thread if it has, else on the compactor's);
// errors::stopped() if the member stops first. `revision` is the answer's
// Answer::wait_compaction (member/answers.h), > 0.
void when_compacted(Context& ctx, int64_t revision, std::function<void(Error)> done);

}  // namespace etcdq::member::kv
