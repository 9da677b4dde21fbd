// http::ChunkedBody: a chunked request body decoded as it arrives, as Go's
// net/http reads one (internal/chunked.go), under the body bound.
#include "http/chunked.h"

#include <gtest/gtest.h>

#include <string>

namespace etcdq::http {
namespace {

using Status = ChunkedBody::Status;

// Feeds `wire` `step` bytes at a time; returns the status and how much was taken.
std::pair<Status, size_t> feed(ChunkedBody& b, const std::string& wire, size_t step) {
  size_t taken = 0;
  Status st = Status::kMore;
  while (taken < wire.size() && st == Status::kMore) {
    std::string_view part = std::string_view(wire).substr(taken, step);
    taken += b.feed(part, &st);
  }
  return {st, taken};
}

TEST(ChunkedBody, DecodesWhateverWayTheBytesArrive) {
  const std::string wire = "4\r\n{\"ke\r\nB;name=value\r\ny\":\"Zm9vIn0\r\n0\r\nX-Trailer: 1\r\n\r\nGET / HTTP/1.1";
  for (size_t step : {1, 2, 3, 7, 1000}) {
    ChunkedBody b(1 << 20);
    auto [st, taken] = feed(b, wire, step);
    EXPECT_EQ(st, Status::kDone) << step;
    EXPECT_EQ(b.body(), "{\"key\":\"Zm9vIn0") << step;
    EXPECT_EQ(wire.substr(taken), "GET / HTTP/1.1") << step;  // the next request stays
  }
}

TEST(ChunkedBody, BareLfAndUpperCaseHexAndNoTrailer) {
  ChunkedBody b(1 << 20);
  auto [st, taken] = feed(b, "A  \n0123456789\r\n0\n\n", 1000);
  EXPECT_EQ(st, Status::kDone);
  EXPECT_EQ(b.body(), "0123456789");
}

TEST(ChunkedBody, MalformedEncodingIsRefused) {
  for (const char* wire : {"x\r\n", "\r\n", "3\r\nabcX\r\n", "11111111111111111\r\n", "-1\r\n"}) {
    ChunkedBody b(1 << 20);
    EXPECT_EQ(feed(b, wire, 1000).first, Status::kMalformed) << wire;
  }
  ChunkedBody longline(1 << 20);
  EXPECT_EQ(feed(longline, std::string(5000, '0'), 100).first, Status::kMalformed);
}

TEST(ChunkedBody, TheBodyBoundHoldsAcrossChunks) {
  ChunkedBody b(10);
  EXPECT_EQ(feed(b, "6\r\nabcdef\r\n5\r\n", 1000).first, Status::kTooLarge);
  ChunkedBody exact(10);
  EXPECT_EQ(feed(exact, "6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n", 1000).first, Status::kDone);
  ChunkedBody huge(10);
  EXPECT_EQ(feed(huge, "ffffffffffffffff\r\n", 1000).first, Status::kTooLarge);
}

}  // namespace
}  // namespace etcdq::http
