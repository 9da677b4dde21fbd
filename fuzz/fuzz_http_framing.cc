// Fuzzes the HTTP/1.1 request framing of the HTTP side (http/
// request_framing.h) as the connections drive it (http/connections.cc):
// whatever a client sends arrives in reads, each followed by advance();
// a complete request is served (the handler takes what its Content-Length
// frames) and advance() runs again for what was pipelined behind it; a
// refusal ends the connection. The first byte picks the bounds (the real
// ones, or small ones so that the fuzzer reaches 413 and 431) and the cut
// into reads; the rest is the connection's bytes.
//
// Invariants:
//   - how the bytes are cut into reads changes nothing: the same requests,
//     handed on byte for byte, and the same refusal;
//   - a request handed on has a header within its bound, a Content-Length
//     that parses and is within the body bound, and no Transfer-Encoding
//     line left (chunked ones are decoded, HTTP/1.0's dropped);
//   - a decoded chunked body is handed on with exactly one Content-Length,
//     its length;
//   - a request handed on has CRLF lines only, each header line a token
//     name (no blank in it), a colon and a value without control bytes, and
//     its Content-Length lines (if several) agree: the bare-LF, folded,
//     malformed and conflicting ones were rewritten or refused (issue #36);
//   - without any Transfer-Encoding, bare LF or folded line, requests are
//     handed on exactly as they came: together, a prefix of the bytes sent.
#include <strings.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "http/request_framing.h"

namespace {

using etcdq::http::RequestFraming;

void check(bool ok) {
  if (!ok) std::abort();
}

struct Outcome {
  std::vector<std::string> requests;  // handed on, in order
  std::vector<bool> decoded;          // each: its body came chunked
  std::string refused;                // the status, when refused
  bool operator==(const Outcome& o) const {
    return requests == o.requests && decoded == o.decoded && refused == o.refused;
  }
};

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && strncasecmp(s.data(), prefix.data(), prefix.size()) == 0;
}

// The header lines (CRLF-separated, request line excluded) of a request.
std::vector<std::string_view> header_lines(std::string_view r, size_t end) {
  std::vector<std::string_view> lines;
  size_t pos = r.find("\r\n") + 2;
  while (pos + 2 < end) {
    size_t next = r.find("\r\n", pos);
    lines.push_back(r.substr(pos, next - pos));
    pos = next + 2;
  }
  return lines;
}

bool token_name(std::string_view name) {
  if (name.empty()) return false;
  for (unsigned char c : name) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
    if (!ok) return false;
  }
  return true;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void check_request(const std::string& r, size_t body, bool decoded, size_t max_header, size_t max_body) {
  size_t end = RequestFraming::header_end(r);
  check(end != std::string::npos && end + body == r.size());
  check(end >= 4 && r.compare(end - 4, 4, "\r\n\r\n") == 0);
  if (!decoded) check(end <= max_header);
  check(body <= max_body);
  size_t lengths = 0;
  std::string_view length;
  for (std::string_view line : header_lines(r, end)) {
    check(line.find('\n') == std::string_view::npos);
    size_t colon = line.find(':');
    check(colon != std::string_view::npos && token_name(line.substr(0, colon)));
    for (unsigned char c : line.substr(colon + 1)) check(c == '\t' || (c >= 0x20 && c != 0x7f));
    check(!starts_with_ci(line, "transfer-encoding:"));
    if (starts_with_ci(line, "content-length:")) {
      std::string_view v = trimmed(line.substr(colon + 1));
      check(lengths == 0 || v == length);
      length = v;
      ++lengths;
    }
  }
  if (decoded) {
    check(lengths == 1);
    size_t n = 0;
    check(RequestFraming::content_length(r, end, &n) && n == body);
  }
}

// The header of `in` (complete; its lines may end in a bare LF) has a
// Transfer-Encoding line.
bool has_te(const std::string& in) {
  size_t end = RequestFraming::header_end(in);
  if (end == std::string::npos) return false;
  for (size_t pos = in.find('\n') + 1; pos < end; pos = in.find('\n', pos) + 1) {
    if (starts_with_ci(std::string_view(in).substr(pos, end - pos), "transfer-encoding:")) return true;
  }
  return false;
}

bool http10(const std::string& in) {
  size_t eol = in.find('\n');
  if (eol != std::string::npos && eol > 0 && in[eol - 1] == '\r') --eol;
  return eol != std::string::npos && eol >= 8 && in.compare(eol - 8, 8, "HTTP/1.0") == 0;
}

template <class Cut>
Outcome serve(std::string_view sent, size_t max_header, size_t max_body, Cut cut) {
  RequestFraming framing(max_header, max_body);
  Outcome out;
  std::string in;
  size_t i = 0;
  while (i < sent.size()) {
    size_t n = std::min(sent.size() - i, std::max<size_t>(1, cut(i)));
    in.append(sent.substr(i, n));
    i += n;
    for (;;) {
      // A request that comes out of this call was decoded from chunks if
      // decoding was under way, or if its header names a Transfer-Encoding
      // that an HTTP/1.1 request may have (any other is refused).
      bool decoded = framing.decoding_chunks() || (has_te(in) && !http10(in));
      const char* status = nullptr;
      RequestFraming::Verdict v = framing.advance(&in, &status);
      if (v == RequestFraming::Verdict::kRefuse) {
        check(status != nullptr);
        out.refused = status;
        return out;
      }
      if (v == RequestFraming::Verdict::kMore) break;
      check(!framing.decoding_chunks());
      size_t end = RequestFraming::header_end(in);
      size_t body = 0;
      check(end != std::string::npos && RequestFraming::content_length(in, end, &body));
      check(in.size() - end >= body);
      std::string request = in.substr(0, end + body);
      check_request(request, body, decoded, max_header, max_body);
      out.requests.push_back(std::move(request));
      out.decoded.push_back(decoded);
      in.erase(0, end + body);
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool small = data[0] & 1;
  const size_t max_header = small ? 256 : 64 << 10;
  const size_t max_body = small ? 32 : 64 << 10;
  const size_t stride = 1 + (data[0] >> 1) % 64;
  std::string_view sent(reinterpret_cast<const char*>(data) + 1, size - 1);

  Outcome whole = serve(sent, max_header, max_body, [&](size_t) { return sent.size(); });
  Outcome cut = serve(sent, max_header, max_body, [&](size_t i) { return stride + i % 3; });
  check(whole == cut);
  if (size < 256) {  // a byte a read is slow on large inputs (each read searches the whole header again)
    Outcome bytes = serve(sent, max_header, max_body, [](size_t) { return size_t{1}; });
    check(whole == bytes);
  }
  bool any_te = false;
  for (size_t k = 0; k + 17 <= sent.size() && !any_te; ++k) {
    any_te = strncasecmp(sent.data() + k, "transfer-encoding", 17) == 0;
  }
  // A bare LF, or a line that starts with a blank (a fold): the header is
  // handed on rewritten in CRLF lines.
  bool rewritten = false;
  for (size_t k = 0; k < sent.size() && !rewritten; ++k) {
    rewritten = sent[k] == '\n' && ((k == 0 || sent[k - 1] != '\r') ||
                                    (k + 1 < sent.size() && (sent[k + 1] == ' ' || sent[k + 1] == '\t')));
  }
  if (!any_te && !rewritten) {
    std::string all;
    for (const std::string& r : whole.requests) all += r;
    check(sent.substr(0, all.size()) == all);
  }
  return 0;
}
