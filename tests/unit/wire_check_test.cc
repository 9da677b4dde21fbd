// The check in front of libraft on a Raft stream (consensus/wire_check.h):
// messages libraft 0.15 encodes pass, however the stream splits them;
// framings libraft would misread are refused before they are complete.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "consensus/wire_check.h"

namespace etcdq::consensus {
namespace {

void put64(std::string *b, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    b->push_back(static_cast<char>(v >> (8 * i)));
}

std::string message(uint64_t type, const std::string &header,
                    const std::string &payload = "") {
  std::string m;
  put64(&m, type);
  put64(&m, header.size());
  return m + header + payload;
}

struct Entry {
  uint8_t type;
  std::string data;
};

// As libraft 0.15's uvEncodeMessage lays out an AppendEntries: four words,
// the entry count, 16 bytes an entry, 8 unused bytes; then the entries' data.
std::string append_entries(const std::vector<Entry> &entries) {
  std::string h;
  for (uint64_t w : {7, 100, 6, 99})
    put64(&h, w);
  put64(&h, entries.size());
  std::string payload;
  for (const Entry &e : entries) {
    put64(&h, 7);
    h.push_back(static_cast<char>(e.type));
    h.append(3, '\0');
    uint32_t len = static_cast<uint32_t>(e.data.size());
    for (int i = 0; i < 4; ++i)
      h.push_back(static_cast<char>(len >> (8 * i)));
    payload += e.data;
  }
  put64(&h, 0);
  return message(1, h, payload);
}

// libraft's configuration encoding, padded to 8 bytes as it pads it.
std::string
configuration(const std::vector<std::pair<uint64_t, std::string>> &servers,
              uint8_t role = 1) {
  std::string c(1, '\1');
  put64(&c, servers.size());
  for (const auto &s : servers) {
    put64(&c, s.first);
    c += s.second;
    c.push_back('\0');
    c.push_back(static_cast<char>(role));
  }
  c.resize((c.size() + 7) / 8 * 8, '\0');
  return c;
}

std::string install_snapshot(const std::string &conf, const std::string &data,
                             uint64_t data_len) {
  std::string h;
  for (uint64_t w : {7, 500, 6, 400})
    put64(&h, w);
  put64(&h, conf.size());
  h += conf;
  put64(&h, data_len);
  put64(&h, 0);
  return message(5, h, data);
}

std::string words(std::initializer_list<uint64_t> ws) {
  std::string b;
  for (uint64_t w : ws)
    put64(&b, w);
  return b;
}

const std::string kConf =
    configuration({{1, "127.0.0.1:2380"}, {2, "127.0.0.1:2381"}});

// Every well-formed message, back to back.
std::string legitimate_stream() {
  return append_entries({}) + // heartbeat
         append_entries({{1, std::string(24, 'c')},
                         {2, std::string(8, '\0')},
                         {3, kConf}}) +
         message(2, words({7, 0, 120})) +       // AppendEntriesResult
         message(3, words({8, 2, 120, 7})) +    // RequestVote, legacy
         message(3, words({8, 2, 120, 7, 3})) + // RequestVote with flags
         message(4, words({8, 1})) +
         message(4, words({8, 1, 1})) + // RequestVoteResult
         install_snapshot(kConf, std::string(16, 's'), 16) + //
         message(6, words({8, 120, 7}));                     // TimeoutNow
}

TEST(WireCheck, EveryMessageLibraftEncodesPassesWhole) {
  WireCheck c;
  EXPECT_TRUE(c.feed(legitimate_stream())) << c.error();
  EXPECT_EQ(c.messages(), 9u);
  EXPECT_EQ(c.error(), "");
}

TEST(WireCheck, EveryMessagePassesFedOneByteAtATime) {
  WireCheck c;
  std::string s = legitimate_stream();
  for (char b : s)
    ASSERT_TRUE(c.feed(std::string(1, b))) << c.error();
  EXPECT_EQ(c.messages(), 9u);
}

TEST(WireCheck, EveryMessagePassesInOddChunks) {
  std::string s = legitimate_stream();
  for (size_t chunk : {3, 7, 17, 100}) {
    WireCheck c;
    for (size_t at = 0; at < s.size(); at += chunk)
      ASSERT_TRUE(c.feed(s.substr(at, chunk))) << c.error();
    EXPECT_EQ(c.messages(), 9u) << chunk;
  }
}

TEST(WireCheck, TruncatedMessageIsAPrefixNotAMessage) {
  WireCheck c;
  std::string m = append_entries({{1, std::string(16, 'c')}});
  EXPECT_TRUE(c.feed(m.substr(0, m.size() - 1)));
  EXPECT_EQ(c.messages(), 0u);
  EXPECT_TRUE(c.feed(m.substr(m.size() - 1)));
  EXPECT_EQ(c.messages(), 1u);
}

// The attack that crashed a member: 16 bytes of preamble and 40 of header
// claiming one entry whose 16-byte header is not there.
TEST(WireCheck, AppendEntriesClaimingAnEntryWithoutItsHeaderIsRefused) {
  std::string h = words({7, 100, 6, 99, 1});
  std::string m = message(1, h);
  ASSERT_EQ(m.size(), 56u);
  WireCheck c;
  EXPECT_FALSE(c.feed(m));
  EXPECT_NE(c.error().find("40-byte header"), std::string::npos) << c.error();
  // With the unused word, the header is long enough for no entry at all.
  WireCheck padded;
  EXPECT_FALSE(padded.feed(message(1, h + words({0}))));
  EXPECT_NE(padded.error().find("1 entries in a 48-byte header"),
            std::string::npos)
      << padded.error();
}

// A forged term near 2^64 left a whole cluster without a next term (every
// put timed out, for good): every message type's term is capped.
TEST(WireCheck, TermsAtOrAboveTheCapAreRefusedForEveryMessageType) {
  const uint64_t cap = WireCheck::kMaxTerm;
  for (uint64_t term : std::vector<uint64_t>{cap, cap + 1, ~0ull}) {
    for (const std::string &m : std::vector<std::string>{
             message(1, words({term, 100, 6, 99, 0, 0})),
          message(2, words({term, 0, 120})), message(3, words({term, 2, 120, 7})),
          message(4, words({term, 1})), message(6, words({term, 120, 7}))}) {
      WireCheck c;
      EXPECT_FALSE(c.feed(m)) << term;
      EXPECT_NE(c.error().find("with term"), std::string::npos) << c.error();
    }
  }
  WireCheck below;
  EXPECT_TRUE(below.feed(message(2, words({cap - 1, 0, 120}))));
  EXPECT_EQ(below.messages(), 1u);
}

TEST(WireCheck, AppendEntriesWithAHugeEntryCountIsRefused) {
  for (uint64_t n : {uint64_t{WireCheck::kMaxEntries} + 1, uint64_t{1} << 32,
                     ~uint64_t{0}}) {
    std::string h = words({7, 100, 6, 99, n, 0});
    WireCheck c;
    EXPECT_FALSE(c.feed(message(1, h))) << n;
  }
}

TEST(WireCheck, HeaderLengthsNoMessageHasAreRefusedFromThePreamble) {
  for (uint64_t len :
       {uint64_t{0}, uint64_t{8}, uint64_t{1} << 40, ~uint64_t{0}}) {
    std::string pre = words({1, len});
    WireCheck c;
    EXPECT_FALSE(c.feed(pre)) << len;
  }
  for (auto [type, len] : std::vector<std::pair<uint64_t, uint64_t>>{
           {2, 16}, {3, 36}, {4, 20}, {6, 32}, {5, 64}}) {
    WireCheck c;
    EXPECT_FALSE(c.feed(words({type, len}))) << type << " " << len;
  }
}

TEST(WireCheck, UnknownMessageTypesAreRefused) {
  for (uint64_t type : {uint64_t{0}, uint64_t{7}, uint64_t{1} << 63}) {
    WireCheck c;
    EXPECT_FALSE(c.feed(words({type, 24})));
    EXPECT_NE(c.error().find("unknown message type"), std::string::npos);
  }
}

TEST(WireCheck, EntriesLibraftWouldWalkPastAreRefused) {
  // Lengths that are not 8-byte multiples (libraft steps over padding they
  // do not count), empty entries, unknown types, oversized entries.
  for (const std::vector<Entry> &es : std::vector<std::vector<Entry>>{
           {{1, std::string(9, 'c')}, {1, std::string(8, 'c')}},
           {{1, ""}},
           {{4, std::string(8, 'c')}},
           {{0, std::string(8, 'c')}}}) {
    WireCheck c;
    EXPECT_FALSE(c.feed(append_entries(es)));
  }
  std::string h = words({7, 100, 6, 99, 1, 7});
  h += std::string("\1\0\0\0", 4);
  uint32_t len = WireCheck::kMaxEntryBytes + 8;
  for (int i = 0; i < 4; ++i)
    h.push_back(static_cast<char>(len >> (8 * i)));
  put64(&h, 0);
  WireCheck c;
  EXPECT_FALSE(c.feed(message(1, h)));
}

TEST(WireCheck, AppendEntriesAddingUpToMoreThanTheMessageCapIsRefused) {
  uint64_t n = WireCheck::kMaxMessageBytes / WireCheck::kMaxEntryBytes + 1;
  std::string h = words({7, 100, 6, 99, n});
  for (uint64_t i = 0; i < n; ++i) {
    put64(&h, 7);
    h += std::string("\1\0\0\0", 4);
    uint32_t len = WireCheck::kMaxEntryBytes;
    for (int k = 0; k < 4; ++k)
      h.push_back(static_cast<char>(len >> (8 * k)));
  }
  put64(&h, 0);
  WireCheck c;
  EXPECT_FALSE(c.feed(message(1, h)));
  EXPECT_NE(c.error().find("more than"), std::string::npos) << c.error();
}

TEST(WireCheck, MalformedConfigurationEntryIsRefusedBeforeItIsWhole) {
  std::string bad = configuration({{1, "127.0.0.1:2380"}});
  bad.back() = 'x'; // no terminator before the role byte
  std::fill(bad.begin() + 17, bad.end(), 'x');
  std::string m = append_entries({{3, bad}});
  WireCheck c;
  EXPECT_TRUE(
      c.feed(m.substr(0, m.size() - 1))); // libraft has not decoded it yet
  EXPECT_FALSE(c.feed(m.substr(m.size() - 1)));
  EXPECT_NE(c.error().find("terminator"), std::string::npos) << c.error();
}

TEST(WireCheck, InstallSnapshotFramingsLibraftWouldMisreadAreRefused) {
  std::string no_nul = kConf;
  std::fill(no_nul.begin() + 17, no_nul.end(), 'x');
  std::string zero_id = configuration({{0, "a"}});
  std::string bad_role = configuration({{1, "a"}}, 9);
  std::string bad_format = kConf;
  bad_format[0] = 2;
  std::string many = kConf;
  many[1] = 100; // claims 100 servers, holds 2
  for (const std::string &conf :
       {no_nul, zero_id, bad_role, bad_format, many}) {
    WireCheck c;
    EXPECT_FALSE(c.feed(install_snapshot(conf, "", 0)));
  }
  // Configuration length beyond the header, and more data than a snapshot of
  // metadata has.
  std::string h = words({7, 500, 6, 400, 1 << 16});
  h += kConf;
  put64(&h, 0);
  put64(&h, 0);
  WireCheck beyond;
  EXPECT_FALSE(beyond.feed(message(5, h)));
  WireCheck big;
  EXPECT_FALSE(big.feed(
      install_snapshot(kConf, "", WireCheck::kMaxSnapshotDataBytes + 1)));
}

TEST(WireCheck, NothingPassesAfterTheFirstRefusal) {
  WireCheck c;
  EXPECT_FALSE(c.feed(words({9, 24})));
  std::string first = c.error();
  EXPECT_FALSE(c.feed(append_entries({})));
  EXPECT_EQ(c.error(), first);
  EXPECT_EQ(c.messages(), 0u);
}

} // namespace
} // namespace etcdq::consensus
