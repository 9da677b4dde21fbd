// Checks a whole command before it may enter the log, whoever built it: a
// client's request translated by this member, or bytes another member
// forwarded (Peer.Propose). It applies the same rules a client request gets
// (apply/validate.h, etcd's v3rpc checks) and the sanity rules of etcdq's
// own commands, so that nothing the apply function cannot handle is ever
// committed (DESIGN.md: validate at the boundary and again before the log).
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "etcdq/command.pb.h"

namespace etcdq::apply {

struct CommandLimits {
  int64_t max_txn_ops = 128;  // --max-txn-ops
};

// Errors: the client rule's error (etcd's code and message) for a request
// that a client could have sent; InvalidArgument "etcdserver: malformed
// command" plus the reason for anything else (no request, a forwarded
// command only the leader itself may propose, a bad field).
// `forwarded`: the command came from another member (a plug-in's decisions,
// keyspace/kind.h, and lease expiry are the leader's own and are never
// forwarded). A command no rule here knows goes to the key-space plug-in
// that owns it (keyspace/registry.h); with none it has no request.
Error check_command(const Command& cmd, const CommandLimits& limits, bool forwarded);

// Decodes the commands a follower forwarded: each element must be exactly
// one frame ([u32 length][Command], apply/entry.h) holding a Command that
// parses completely. Nested txns need a deeper parse than protobuf's default.
// Errors: InvalidArgument "etcdserver: malformed command" and the reason.
Error decode_forwarded(const std::string& framed, Command* out);

}  // namespace etcdq::apply
