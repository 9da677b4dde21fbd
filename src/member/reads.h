// The one read path of a member: every read served without the log —
// the KV service's Range and read-only Txn (so also the JSON gateway's,
// which calls them), the Lock and Election recipes' reads
// (server/local_client.h) and the Auth service's reads — waits here as its
// consistency asks, then reads the newest applied state.
//
// As etcd's (etcdserver/v3_server.go, Range and linearizableReadNotify):
// a serializable read serves this member's applied state at once; a
// linearizable one first waits for consensus's read barrier (leadership
// confirmed, everything committed before the call applied: consensus/node.h,
// read_barrier), then serves locally. A permission `check` runs after that
// wait, as etcd checks after its read index: a follower has then applied
// every auth change the leader had, so a revoked permission (or auth just
// enabled) cannot still be honoured there.
//
// Thread-safety: any thread. Callbacks run on the calling thread for a
// serializable read, else on whichever thread ended the barrier (the
// consensus thread or the caller's); they must not block.
#pragma once

#include <functional>

#include "apply/kv.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "member/context.h"

namespace etcdq::member {

enum class ReadMode { kSerializable, kLinearizable };

// A Range's mode (its serializable flag); a read-only Txn is serializable
// only when every Range in it, nested txns included, is.
ReadMode read_mode(const etcdserverpb::RangeRequest& r);
ReadMode read_mode(const etcdserverpb::TxnRequest& r);

// Waits as `mode` says, then `then(error)`: the barrier's error (e.g.
// errors::no_leader(), errors::timeout(), errors::stopped()) or OK. For
// reads of state beside the key space (auth/store.h).
void when_readable(Context& ctx, ReadMode mode, std::function<void(Error)> then);

// when_readable, then `check` (none: passes), then `read` on a view of the
// newest applied revision through the apply chain's key space (ctx.keys).
// `done` gets the first error, or OK.
void read(Context& ctx, ReadMode mode, std::function<Error()> check, std::function<Error(apply::ViewState&)> read,
          std::function<void(Error)> done);

// etcd's Range and read-only Txn on read(): `resp` filled, its header too
// (Context::fill_header), when `done` gets OK. The request is validated by
// the caller (apply/validate.h); `req` and `resp` must live until `done`.
void range(Context& ctx, ReadMode mode, const etcdserverpb::RangeRequest* req, etcdserverpb::RangeResponse* resp,
           std::function<Error()> check, std::function<void(Error)> done);
void read_txn(Context& ctx, ReadMode mode, const etcdserverpb::TxnRequest* req, etcdserverpb::TxnResponse* resp,
              std::function<Error()> check, std::function<void(Error)> done);

}  // namespace etcdq::member
