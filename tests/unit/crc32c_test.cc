#include "common/crc32c.h"

#include <gtest/gtest.h>

namespace etcdq {
namespace {

// Check values of CRC-32C (RFC 3720 B.4; Go: crc32.Checksum([]byte("123456789"), castagnoli)).
TEST(Crc32c, KnownValues) {
  Crc32c a;
  a.update("123456789");
  EXPECT_EQ(a.value(), 0xE3069283u);
  Crc32c zeros;
  std::string z(32, '\0');
  zeros.update(z);
  EXPECT_EQ(zeros.value(), 0x8A9136AAu);
  Crc32c empty;
  EXPECT_EQ(empty.value(), 0u);
}

TEST(Crc32c, StreamingEqualsOneShot) {
  Crc32c one, two;
  one.update("key" "hello world");
  two.update("key");
  two.update("hello ");
  two.update("world");
  EXPECT_EQ(one.value(), two.value());
}

}  // namespace
}  // namespace etcdq
