// common/state_pairs.h: Peer.FetchSnapshot's packed pairs, which come from
// a peer: every record read back as written, and a chunk cut or forged
// anywhere is refused without reading past its end.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "common/state_pairs.h"

namespace etcdq {
namespace {

using Record = std::tuple<uint32_t, std::string, std::string>;

Error read_all(std::string_view packed, std::vector<Record>* out) {
  return state_pairs::for_each(packed, [out](uint32_t cf, std::string_view k, std::string_view v) -> Error {
    out->emplace_back(cf, std::string(k), std::string(v));
    return {};
  });
}

std::vector<Record> sample() {
  return {{0, "applied_index", std::string("\0\0\0\0\0\0\0\x07", 8)},
          {1, "", ""},
          {2, "k", std::string(70000, 'v')},
          {3, std::string(300, 'q'), "x"}};
}

std::string pack(const std::vector<Record>& records) {
  std::string packed;
  for (const auto& [cf, k, v] : records) state_pairs::append(&packed, cf, k, v);
  return packed;
}

TEST(StatePairs, RecordsReadBackAsWritten) {
  std::vector<Record> got;
  ASSERT_FALSE(read_all(pack(sample()), &got));
  EXPECT_EQ(got, sample());
  got.clear();
  ASSERT_FALSE(read_all("", &got));
  EXPECT_TRUE(got.empty());
}

TEST(StatePairs, EveryCutIsRefusedOrEndsAtARecord) {
  const std::string packed = pack(sample());
  std::vector<size_t> ends;  // where each record ends
  size_t at = 0;
  for (const auto& [cf, k, v] : sample()) ends.push_back(at += state_pairs::kRecordOverhead + k.size() + v.size());
  for (size_t cut = 0; cut < packed.size(); ++cut) {
    std::vector<Record> got;
    // A copy of exactly `cut` bytes, so that ASan sees any read past it.
    const std::string part = packed.substr(0, cut);
    Error e = read_all(part, &got);
    size_t whole = 0;
    while (whole < ends.size() && ends[whole] <= cut) ++whole;
    EXPECT_EQ(got.size(), whole) << "cut at " << cut;
    const bool at_boundary = cut == 0 || (whole > 0 && ends[whole - 1] == cut);
    EXPECT_EQ(static_cast<bool>(e), !at_boundary) << "cut at " << cut;
    if (e) {
      EXPECT_NE(e.message().find("malformed state chunk"), std::string::npos) << e.message();
    }
  }
}

TEST(StatePairs, LengthsPastTheEndAreRefused) {
  // Key and value lengths whose sum overflows 32 bits, and each alone too
  // big: nothing is handed on.
  for (const std::string& header : {std::string("\x01\xff\xff\xff\xff\x02\x00\x00\x00", 9),
                                     std::string("\x01\x01\x00\x00\x00\xff\xff\xff\xff", 9),
                                     std::string("\x01\x00\x00\x00\x80\x00\x00\x00\x80", 9)}) {
    std::vector<Record> got;
    Error e = read_all(header + "abc", &got);
    EXPECT_TRUE(e);
    EXPECT_TRUE(got.empty());
  }
}

TEST(StatePairs, TheVisitorsErrorStopsTheWalk) {
  int calls = 0;
  Error e = state_pairs::for_each(pack(sample()), [&](uint32_t, std::string_view, std::string_view) -> Error {
    return ++calls == 2 ? errors::internal("stop here") : Error{};
  });
  EXPECT_EQ(calls, 2);
  ASSERT_TRUE(e);
  EXPECT_EQ(e.message(), "stop here");
}

TEST(StatePairs, ChecksumIsZlibsCrc32FedInOrder) {
  // The IEEE CRC-32 check value (Go's crc32.ChecksumIEEE("123456789")).
  EXPECT_EQ(state_pairs::checksum(0, "123456789"), 0xCBF43926u);
  EXPECT_EQ(state_pairs::checksum(0, ""), 0u);
  // A stream's checksum is its chunks' fed in order, however it is cut.
  const std::string all = pack(sample());
  for (size_t cut = 0; cut <= all.size(); cut += 997) {  // 70 cuts, through records and between them
    const std::string_view v(all);
    EXPECT_EQ(state_pairs::checksum(state_pairs::checksum(0, v.substr(0, cut)), v.substr(cut)),
              state_pairs::checksum(0, all));
  }
}

}  // namespace
}  // namespace etcdq
