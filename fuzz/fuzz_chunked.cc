// Fuzzes the decoding of a chunked request body (http/chunked.h), as the
// HTTP connections feed it whatever a client sends after a
// "Transfer-Encoding: chunked" header. The first byte picks the body bound
// (small ones, so that the fuzzer reaches 413, and the real default) and
// how the bytes are cut into reads; the rest is the body as sent.
//
// Invariants: the decoded body never exceeds its bound, nor a line its
// limit; how the bytes arrive (all at once, a byte a read, or the cut the
// input picks) changes nothing: the same status, bytes taken and body; a
// body that decodes, encoded again in chunks of other sizes (with an
// extension and a trailer), decodes to the same bytes and ends exactly
// where its encoding ends.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "http/chunked.h"

namespace {

using etcdq::http::ChunkedBody;

void check(bool ok) {
  if (!ok) std::abort();
}

struct Result {
  ChunkedBody::Status status = ChunkedBody::Status::kMore;
  size_t used = 0;
  std::string body;
};

// Feeds `in` in pieces of `cut(i)` bytes (at least one), as reads give
// them, until the body ends or is refused.
template <class Cut>
Result decode(std::string_view in, size_t max_body, Cut cut) {
  ChunkedBody d(max_body);
  Result r;
  size_t i = 0;
  while (i < in.size()) {
    size_t n = std::min(in.size() - i, std::max<size_t>(1, cut(i)));
    std::string_view piece = in.substr(i, n);
    size_t took = d.feed(piece, &r.status);
    check(took <= piece.size());
    // Everything given is taken while the body goes on.
    if (r.status == ChunkedBody::Status::kMore) check(took == piece.size());
    r.used += took;
    i += n;
    check(d.body().size() <= max_body);
    if (r.status != ChunkedBody::Status::kMore) break;
  }
  r.body = d.body();
  return r;
}

void same(const Result& a, const Result& b) {
  check(a.status == b.status);
  check(a.body == b.body);
  // Where decoding stopped: the same byte, except for a malformed or too
  // large body, which may be noticed at a different byte of the line
  // (the line's length is judged per read).
  if (a.status == ChunkedBody::Status::kDone || a.status == ChunkedBody::Status::kMore) check(a.used == b.used);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static constexpr size_t kBounds[] = {0, 1, 16, 255, 4096, 64 << 10};
  const size_t max_body = kBounds[data[0] % 6];
  const size_t stride = 1 + (data[0] >> 3);  // the input's own cut: 1..32 bytes a read
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);

  Result whole = decode(in, max_body, [&](size_t) { return in.size(); });
  Result bytes = decode(in, max_body, [](size_t) { return size_t{1}; });
  Result cut = decode(in, max_body, [&](size_t i) { return stride + (i % 7); });
  same(whole, bytes);
  same(whole, cut);
  check(whole.used <= in.size());
  check(whole.body.size() <= max_body);
  if (whole.status != ChunkedBody::Status::kDone) return 0;

  // Encoded again, in chunks of 1..stride bytes, upper-case hex and an
  // extension on the first, a trailer line at the end.
  std::string again;
  const std::string& body = whole.body;
  for (size_t i = 0, k = 0; i < body.size(); ++k) {
    size_t n = std::min(body.size() - i, 1 + (k * 5) % stride);
    char len[32];
    std::snprintf(len, sizeof(len), k == 0 ? "%zX;ext=1\r\n" : "%zx\r\n", n);
    again += len;
    again.append(body, i, n);
    again += "\r\n";
    i += n;
  }
  again += "0\r\nX-Trailer: 1\r\n\r\n";
  std::string tail = again + "GET / HTTP/1.1\r\n";  // a pipelined request after it stays behind
  Result round = decode(tail, max_body, [&](size_t) { return tail.size(); });
  check(round.status == ChunkedBody::Status::kDone);
  check(round.body == body);
  check(round.used == again.size());
  return 0;
}
