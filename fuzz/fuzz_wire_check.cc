// Fuzzes the peer wire check (consensus/wire_check.h), which sees every byte a
// peer sends on a Raft stream before libraft does. The first byte picks how
// the stream is cut into reads; the rest is the stream.
//
// Invariants: how the stream is cut changes nothing (whole, a byte a read,
// or the input's cut: the same verdict, error and messages); nothing passes
// after the first refusal, and the error stays; what it buffers stays
// within its bound. And the other way round: messages laid out as libraft
// 0.15 encodes them, with counts, lengths and terms taken from the input
// (within libraft's ranges), all pass, however they are cut.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "consensus/wire_check.h"

namespace {

using etcdq::consensus::WireCheck;

void check(bool ok) {
  if (!ok) std::abort();
}

constexpr size_t kMaxBuffered =
    std::max<size_t>(48 + 16 * WireCheck::kMaxEntries, 56 + WireCheck::kMaxConfigurationBytes);

struct Result {
  bool ok = true;
  uint64_t messages = 0;
  std::string error;
};

template <class Cut>
Result run(std::string_view s, Cut cut) {
  WireCheck c;
  Result r;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = std::min(s.size() - i, std::max<size_t>(1, cut(i)));
    bool ok = c.feed(s.substr(i, n));
    i += n;
    check(c.buffered() <= kMaxBuffered);
    if (!ok) {
      check(!c.error().empty());
      r.ok = false;
      break;
    }
    check(c.error().empty());
  }
  r.messages = c.messages();
  r.error = c.error();
  if (!r.ok) {
    // Refused for good: more bytes change nothing.
    std::string m = c.error();
    check(!c.feed(std::string(16, '\0')) && c.error() == m && c.messages() == r.messages);
  }
  return r;
}

void put64(std::string* b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b->push_back(static_cast<char>(v >> (8 * i)));
}

std::string message(uint64_t type, const std::string& header, const std::string& payload = "") {
  std::string m;
  put64(&m, type);
  put64(&m, header.size());
  return m + header + payload;
}

// Reads the input as the numbers the well-formed messages are built from.
struct Source {
  std::string_view s;
  size_t at = 0;
  uint64_t u8() { return at < s.size() ? static_cast<uint8_t>(s[at++]) : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | u8();
    return v;
  }
  bool done() const { return at >= s.size(); }
};

// libraft 0.15's configuration encoding, padded to 8 bytes as it pads it.
std::string configuration(Source* in) {
  size_t n = in->u8() % 4;
  std::string c(1, '\1');
  put64(&c, n);
  for (size_t i = 0; i < n; ++i) {
    put64(&c, 1 + in->u8());
    c += "10.0.0." + std::to_string(in->u8()) + ":2380";
    c.push_back('\0');
    c.push_back(static_cast<char>(in->u8() % 3));
  }
  c.resize((c.size() + 7) / 8 * 8, '\0');
  return c;
}

std::string well_formed(Source* in) {
  uint64_t term = in->u64() % WireCheck::kMaxTerm;
  switch (in->u8() % 6) {
    case 0: {  // AppendEntries: term, prev index, prev term, commit, count, 16 bytes an entry, 8 unused
      std::string h;
      put64(&h, term);
      for (int i = 0; i < 3; ++i) put64(&h, in->u64());
      size_t n = in->u8() % 5;
      put64(&h, n);
      std::string payload;
      for (size_t i = 0; i < n; ++i) {
        uint8_t type = static_cast<uint8_t>(1 + in->u8() % 3);
        std::string data = type == 3 ? configuration(in) : std::string(8 * (1 + in->u8() % 8), 'd');
        put64(&h, in->u64());
        h.push_back(static_cast<char>(type));
        h.append(3, '\0');
        uint32_t len = static_cast<uint32_t>(data.size());
        for (int k = 0; k < 4; ++k) h.push_back(static_cast<char>(len >> (8 * k)));
        payload += data;
      }
      put64(&h, 0);
      return message(1, h, payload);
    }
    case 1: {  // AppendEntriesResult, TimeoutNow: three words
      std::string h;
      put64(&h, term);
      put64(&h, in->u64());
      put64(&h, in->u64());
      return message(in->u8() % 2 ? 2 : 6, h);
    }
    case 2: {  // RequestVote, with or without its flags word
      std::string h;
      put64(&h, term);
      for (int i = 0; i < (in->u8() % 2 ? 4 : 3); ++i) put64(&h, in->u64());
      return message(3, h);
    }
    case 3: {  // RequestVoteResult, with or without its flags word
      std::string h;
      put64(&h, term);
      for (int i = 0; i < (in->u8() % 2 ? 2 : 1); ++i) put64(&h, in->u64());
      return message(4, h);
    }
    default: {  // InstallSnapshot: term, last index, last term, conf index, conf length, conf, data length, 8 unused
      std::string conf = configuration(in);
      std::string h;
      put64(&h, term);
      for (int i = 0; i < 3; ++i) put64(&h, in->u64());
      put64(&h, conf.size());
      h += conf;
      size_t data = in->u8() * 3;
      put64(&h, data);
      put64(&h, 0);
      return message(5, h, std::string(data, 's'));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t stride = 1 + data[0] % 61;
  std::string_view s(reinterpret_cast<const char*>(data) + 1, size - 1);

  Result whole = run(s, [&](size_t) { return s.size(); });
  Result bytes = run(s, [](size_t) { return size_t{1}; });
  Result cut = run(s, [&](size_t i) { return stride + i % 5; });
  for (const Result* r : {&bytes, &cut}) {
    check(r->ok == whole.ok && r->error == whole.error && r->messages == whole.messages);
  }

  Source in{s};
  std::string stream;
  uint64_t count = 0;
  for (; !in.done() && count < 16; ++count) stream += well_formed(&in);
  Result good = run(stream, [&](size_t i) { return stride + i % 3; });
  check(good.ok && good.messages == count);
  return 0;
}
