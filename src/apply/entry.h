// Framing of a Raft log entry: a batch of serialized apply::Command
// (proto/etcdq/command.proto), each as [u32 little-endian length][bytes],
// zero-padded to a multiple of 8 bytes (libraft 0.15 cannot reload a log
// with other sizes). A zero length ends the batch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "etcdq/command.pb.h"

namespace etcdq::apply {

// How deep a command's messages may nest: a client request may nest up to
// kMaxRequestNesting (apply/validate.h: nested txns nest two levels each,
// and etcd allows up to --max-txn-ops of them, beyond protobuf's default
// of 100), and a command wraps it in a few more.
inline constexpr int kMaxCommandNesting = 4096 + 8;

void append_framed(std::string* entry, std::string_view command);
void pad_entry(std::string* entry);
// Takes the next command off the front of `*rest`; false at the end or on a
// truncated frame (`*corrupt` tells which).
bool next_framed(std::string_view* rest, std::string_view* command, bool* corrupt);

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
