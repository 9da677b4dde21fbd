// Fuzzes the decoding of what a member reads from its Raft log or from a
// peer (apply/entry.h): the input is taken as a whole log entry, then as
// one command a follower forwarded to the leader.
//
// Invariants: framing never reads outside the entry; a command that decodes
// re-encodes to bytes that decode to the same command; a forwarded command
// the leader accepts (well_framed_command) comes back out of the entry it
// is packed into, whole, followed by the next one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>

#include "apply/entry.h"
#include "etcdq/command.pb.h"

namespace {

using etcdq::apply::Command;

void check(bool ok) {
  if (!ok) std::abort();
}

void decode_entry(std::string_view entry) {
  std::string_view rest = entry;
  std::string_view bytes;
  bool corrupt = false;
  while (etcdq::apply::next_framed(&rest, &bytes, &corrupt)) {
    check(!bytes.empty());
    check(bytes.data() >= entry.data() && bytes.data() + bytes.size() <= entry.data() + entry.size());
    Command cmd;
    if (!etcdq::apply::decode_command(bytes, &cmd)) continue;
    Command again;
    check(etcdq::apply::decode_command(cmd.SerializeAsString(), &again));
    check(google::protobuf::util::MessageDifferencer::Equals(cmd, again));
  }
}

// The leader packs forwarded commands back to back and pads the entry
// (consensus/node.cc, propose_entries); every member then reads them back.
void forwarded(std::string_view framed) {
  if (!etcdq::apply::well_framed_command(framed)) return;
  std::string other;
  etcdq::apply::append_framed(&other, "\x08\x01");  // Command{origin: 1}
  std::string entry(framed);
  entry += other;
  etcdq::apply::pad_entry(&entry);
  check(entry.size() % 8 == 0);
  std::string_view rest = entry;
  std::string_view bytes;
  bool corrupt = false;
  check(etcdq::apply::next_framed(&rest, &bytes, &corrupt));
  check(bytes == framed.substr(4));
  check(etcdq::apply::next_framed(&rest, &bytes, &corrupt));
  check(bytes == "\x08\x01");
  check(!etcdq::apply::next_framed(&rest, &bytes, &corrupt) && !corrupt);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" per input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  decode_entry(in);
  forwarded(in);
  return 0;
}
