// Framing of log entries and of the commands a follower forwards
// (apply/entry.h): what the leader lets into the log, and how members read
// it back.
#include <gtest/gtest.h>

#include <string>

#include "apply/entry.h"
#include "etcdq/command.pb.h"

namespace etcdq {
namespace {

std::string put_command(const std::string& key) {
  apply::Command c;
  c.set_origin(1);
  c.set_proposal_id(2);
  c.mutable_put()->set_key(key);
  c.mutable_put()->set_value("v");
  return c.SerializeAsString();
}

std::string framed_entry(const std::string& bytes) {
  std::string out;
  apply::append_framed(&out, bytes);
  return out;
}

TEST(EntryFraming, ForwardedCommandIsAcceptedWhenItIsOneFrame) {
  EXPECT_TRUE(apply::well_framed_command(framed_entry(put_command("a"))));
}

// A frame that claims more bytes than it has would swallow the commands
// packed after it, or leave a truncated entry that stops every member.
TEST(EntryFraming, ForwardedFrameLongerThanItsBytesIsRefused) {
  std::string f = framed_entry(put_command("a"));
  f.pop_back();
  EXPECT_FALSE(apply::well_framed_command(f));
}

// A zero length ends an entry's batch: the commands after it would never apply.
TEST(EntryFraming, ForwardedEmptyFrameIsRefused) {
  EXPECT_FALSE(apply::well_framed_command(std::string(4, '\0')));
  EXPECT_FALSE(apply::well_framed_command(""));
}

TEST(EntryFraming, ForwardedFrameWithTrailingBytesIsRefused) {
  EXPECT_FALSE(apply::well_framed_command(framed_entry(put_command("a")) + framed_entry(put_command("b"))));
  EXPECT_FALSE(apply::well_framed_command(framed_entry(put_command("a")) + "x"));
}

TEST(EntryFraming, ForwardedFrameThatDoesNotDecodeIsRefused) {
  EXPECT_FALSE(apply::well_framed_command(framed_entry("\xff\xff\xff")));
}

// What the leader does with accepted forwarded commands: packs them back to
// back and pads the entry; every member reads the same commands back.
TEST(EntryFraming, PackedForwardedCommandsReadBackInOrder) {
  std::string entry = framed_entry(put_command("a")) + framed_entry(put_command("b"));
  apply::pad_entry(&entry);
  ASSERT_EQ(entry.size() % 8, 0u);
  std::string_view rest = entry;
  std::string_view bytes;
  bool corrupt = true;
  ASSERT_TRUE(apply::next_framed(&rest, &bytes, &corrupt));
  EXPECT_EQ(bytes, put_command("a"));
  ASSERT_TRUE(apply::next_framed(&rest, &bytes, &corrupt));
  EXPECT_EQ(bytes, put_command("b"));
  EXPECT_FALSE(apply::next_framed(&rest, &bytes, &corrupt));
  EXPECT_FALSE(corrupt);
}

}  // namespace
}  // namespace etcdq
