// A Raft log entry's commands: a batch of serialized apply::Command
// (proto/etcdq/command.proto) in the framing of common/entry_frames.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/entry_frames.h"
#include "etcdq/command.pb.h"

namespace etcdq::apply {

// How deep a command's messages may nest: a client request may nest up to
// kMaxRequestNesting (apply/validate.h: nested txns nest two levels each,
// and etcd allows up to --max-txn-ops of them, beyond protobuf's default
// of 100), and a command wraps it in a few more.
inline constexpr int kMaxCommandNesting = 4096 + 8;

using etcdq::append_framed;
using etcdq::next_framed;
using etcdq::pad_entry;

// Parses one command's bytes, all of them, as apply does. False when they
// are not exactly one Command.
bool decode_command(std::string_view bytes, Command* cmd);

// A command a follower forwarded to the leader (peer.proto's
// ProposeRequest.commands): exactly one frame around a command that
// decodes. The leader checks this before it copies the bytes into a log
// entry, as it validates anything it proposes: a frame longer than its
// bytes would make every member stop on a truncated entry, and an empty one
// would end the entry's batch early and drop the commands after it.
bool well_framed_command(std::string_view framed);

}  // namespace etcdq::apply
