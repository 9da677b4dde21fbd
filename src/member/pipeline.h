// The one way a write enters the log from this member: every proposal —
// KV, Txn, Compact, Lease grant and revoke (also the leader's expiries),
// Alarm, Lock and Election recipes, key-space plug-ins' own commands and
// deletes (keyspace/kind.h), member attributes — and every command another member forwards
// is admitted here, with the same checks in the same order:
//
//   1. the command's own rules (apply/command_check.h: etcd's request
//      checks, and etcdq's command sanity),
//   2. size (--max-request-bytes, etcd's ErrRequestTooLarge),
//   3. quota and alarms (etcd's quota.go: NOSPACE, CORRUPT),
//   4. permissions (member/auth.h: the user a token named, stamped on the
//      command by the service, against auth/request_checks.h's rules),
//
// then it is handed to consensus. Services translate requests and answer;
// they do not check writes themselves.
//
// Thread-safety: any thread.
#pragma once

#include "apply/applier.h"
#include "etcdq/command.pb.h"
#include "member/context.h"
#include "member/fsm.h"

namespace etcdq::member {

// etcd refuses a proposal whose encoding exceeds --max-request-bytes
// (ErrRequestTooLarge, etcdserver/v3_server.go). What it measures is its
// InternalRaftRequest, which adds a request header (about 13 bytes) to the
// request; we count the same so the same requests pass.
Error check_request_size(const Context& ctx, const apply::Command& cmd);

// etcd's quota (etcdserver/quota.go): a request that adds data fails with
// errors::no_space() while the NOSPACE alarm is raised, or when the database
// plus the request would exceed --quota-backend-bytes, in which case this
// member raises NOSPACE through the log. Reads and deletes always pass.
Error check_quota(Context& ctx, const apply::Command& cmd);


// Where a command comes from: this member's own request, or a follower's
// forwarded one (some commands are only ever the leader's own).
enum class Source { kLocal, kForwarded };

// Runs the checks above; the first error, or OK. A forwarded command skips
// the quota check: its member checked it, the alarms it depends on are
// replicated, and a batch refused here fails every proposal in it.
Error admit(Context& ctx, const apply::Command& cmd, Source source);

// admit(), then Consensus::propose() (member/consensus.h). `done` runs
// exactly once: with the admission error (on this thread) or as
// Consensus::propose says.
void propose(Context& ctx, apply::Command cmd, CommandDone done);

}  // namespace etcdq::member
