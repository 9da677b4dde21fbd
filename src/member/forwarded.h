// Commands another member forwarded to this one as leader (Peer.Propose):
// decoded and checked here, once, before consensus copies their bytes into
// the log unopened (consensus::Node::propose_forwarded). The leader is the last
// member that can keep a bad command out of the log: once committed, every
// member must apply it (as skipped). A peer with a bad build, or anyone who
// can reach the peer URL while it has no TLS, gets nothing past this.
//
// Thread-safety: any thread.
#pragma once

#include <string>

#include "common/error.h"
#include "etcdq/command.pb.h"
#include "member/context.h"

namespace etcdq::member {

// Decodes `framed` (exactly one frame around one command that parses
// completely: apply::decode_forwarded) into `*cmd` and admits it as a
// forwarded command (member/pipeline.h: the command's own rules, with a
// key-space plug-in's decisions refused as the leader's own,
// apply/command_check.h, and size).
// Errors: InvalidArgument "etcdserver: malformed command: ..." for bytes
// that are not one such command; otherwise admit()'s.
Error admit_forwarded(Context& ctx, const std::string& framed, apply::Command* cmd);

}  // namespace etcdq::member
