// The framing of a Raft log entry, shared by the layer that packs commands
// into entries (consensus/) and the one that applies them (apply/): a batch of
// opaque commands, each as [u32 little-endian length][bytes], zero-padded to
// a multiple of 8 bytes (libraft 0.15 cannot reload a log with other
// sizes). A zero length ends the batch. What a command's bytes mean is
// apply/'s (apply/entry.h).
//
// Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

namespace etcdq {

void append_framed(std::string* entry, std::string_view command);
void pad_entry(std::string* entry);
// Takes the next command off the front of `*rest`; false at the end or on a
// truncated frame (`*corrupt` tells which).
bool next_framed(std::string_view* rest, std::string_view* command, bool* corrupt);

}  // namespace etcdq
