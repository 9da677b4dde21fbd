// Framing of a Raft log entry: a batch of serialized apply::Command
// (proto/etcdq/command.proto), each as [u32 little-endian length][bytes],
// zero-padded to a multiple of 8 bytes (libraft 0.15 cannot reload a log
// with other sizes). A zero length ends the batch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace etcdq::apply {

void append_framed(std::string* entry, std::string_view command);
void pad_entry(std::string* entry);
// Takes the next command off the front of `*rest`; false at the end or on a
// truncated frame (`*corrupt` tells which).
bool next_framed(std::string_view* rest, std::string_view* command, bool* corrupt);

}  // namespace etcdq::apply
