#include "http/request_framing.h"

#include <strings.h>

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace etcdq::http {

namespace {

// What the header block (up to `end`) says of Transfer-Encoding, as Go's
// net/http reads it (transfer.go, parseTransferEncoding): none; one
// "chunked" (the body is decoded here, chunked.h, and the request handed on
// framed by Content-Length, which a chunked request's own Content-Length
// does not override); anything else is refused with 501 (Go's
// "Unsupported transfer encoding"). An HTTP/1.0 request's is ignored, as
// Go does, and dropped, so that nothing after this reads it either.
enum class Framing { kLength, kLengthIgnoredTe, kChunked, kUnsupported };

bool is_header(const std::string& in, size_t pos, const char* name, size_t name_len) {
  return strncasecmp(in.data() + pos, name, name_len) == 0;
}

Framing framing(const std::string& in, size_t end) {
  static const char kName[] = "transfer-encoding:";
  const size_t name_len = sizeof(kName) - 1;
  size_t count = 0;
  std::string value;
  for (size_t pos = in.find("\r\n") + 2; pos < end;) {
    size_t next = in.find("\r\n", pos);
    if (next == std::string::npos || next > end) break;
    if (next - pos >= name_len && is_header(in, pos, kName, name_len)) {
      ++count;
      size_t a = pos + name_len, b = next;
      while (a < b && (in[a] == ' ' || in[a] == '\t')) ++a;
      while (b > a && (in[b - 1] == ' ' || in[b - 1] == '\t')) --b;
      value = in.substr(a, b - a);
    }
    pos = next + 2;
  }
  if (count == 0) return Framing::kLength;
  size_t eol = in.find("\r\n");
  if (eol >= 8 && in.compare(eol - 8, 8, "HTTP/1.0") == 0) return Framing::kLengthIgnoredTe;
  if (count == 1 && strcasecmp(value.c_str(), "chunked") == 0) return Framing::kChunked;
  return Framing::kUnsupported;
}

// The header block (up to `end`, its blank line included) without its
// Transfer-Encoding lines, without its Content-Length lines when
// `drop_length`, and without the blank line.
std::string without_framing(const std::string& in, size_t end, bool drop_length) {
  static const char kTe[] = "transfer-encoding:";
  static const char kCl[] = "content-length:";
  size_t eol = in.find("\r\n");
  std::string out = in.substr(0, eol + 2);
  for (size_t pos = eol + 2; pos + 2 < end;) {
    size_t next = in.find("\r\n", pos);
    if (next == std::string::npos || next > end) break;
    size_t len = next - pos;
    bool drop = (len >= sizeof(kTe) - 1 && is_header(in, pos, kTe, sizeof(kTe) - 1)) ||
                (drop_length && len >= sizeof(kCl) - 1 && is_header(in, pos, kCl, sizeof(kCl) - 1));
    if (!drop) out.append(in, pos, len + 2);
    pos = next + 2;
  }
  return out;
}

// RFC 9110's tchar, the bytes of a header name (Go's validHeaderFieldByte).
bool token_byte(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

// A byte a header value may hold: no control byte but HTAB (Go's
// validHeaderValueByte; obs-text, 0x80 and up, is allowed).
bool value_byte(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The header block `in[0, end)` (header_end()) read as Go reads it: its
// lines up to an LF, a CR before the LF dropped (net/textproto reader.go,
// readLineSlice); a line that starts with a blank continues the one before
// (obs-fold; joined by one space, blanks trimmed: readContinuedLineSlice),
// but not the first header line; each line a name, a colon, a value
// (readMIMEHeader). Then net/http's check of the names (server.go
// readRequest), which comes after the framing's (readTransfer).
struct HeaderLines {
  bool malformed = false;        // textproto refuses it: "400 Bad Request"
  bool name_with_space = false;  // textproto takes it, net/http refuses it: "invalid header name"
  std::vector<std::string> lengths;  // the Content-Length values, blanks trimmed
  bool canonical = true;         // CRLF lines, none folded: `in` is handed on as it came
  std::string rebuilt;           // else the header in that form (CRLF lines, folds joined)
};

HeaderLines read_header_lines(const std::string& in, size_t end) {
  HeaderLines h;
  std::vector<std::string> lines;  // logical lines, without their line ends
  for (size_t pos = 0; pos < end;) {
    size_t nl = in.find('\n', pos);
    size_t stop = (nl > pos && in[nl - 1] == '\r') ? nl - 1 : nl;
    if (stop == nl) h.canonical = false;  // a bare LF
    std::string_view line(in.data() + pos, stop - pos);
    pos = nl + 1;
    if (line.empty() && !lines.empty()) break;  // the blank line
    if (lines.size() > 1 && (line.front() == ' ' || line.front() == '\t')) {
      h.canonical = false;
      std::string& prev = lines.back();
      while (!prev.empty() && (prev.back() == ' ' || prev.back() == '\t')) prev.pop_back();
      prev += ' ';
      prev.append(trim_blanks(line));
      continue;
    }
    if (lines.size() == 1 && (line.front() == ' ' || line.front() == '\t')) {
      h.malformed = true;  // "malformed MIME header initial line"
      return h;
    }
    if (lines.size() >= 1 && line.find(':') == std::string_view::npos) {
      h.malformed = true;  // "malformed MIME header: missing colon"
      return h;
    }
    lines.emplace_back(line);
  }
  // An empty request line (a blank line before the request): Go's
  // "malformed HTTP request" (it forgives up to 4 such bytes after a POST
  // only, which this does not).
  if (lines.empty() || lines[0].empty()) {
    h.malformed = true;
    return h;
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    size_t colon = line.find(':');
    std::string_view name = line.substr(0, colon), value = line.substr(colon + 1);
    if (name.empty()) h.malformed = true;
    for (unsigned char c : name) {
      if (c == ' ') {
        h.name_with_space = true;  // textproto keeps such a name (go.dev/issue/34540)
      } else if (!token_byte(c)) {
        h.malformed = true;
      }
    }
    for (unsigned char c : value) {
      if (!value_byte(c)) h.malformed = true;
    }
    if (h.malformed) return h;
    if (name.size() == 14 && strncasecmp(name.data(), "content-length", 14) == 0) {
      h.lengths.emplace_back(trim_blanks(value));
    }
  }
  if (!h.canonical) {
    for (const std::string& line : lines) {
      h.rebuilt += line;
      h.rebuilt += "\r\n";
    }
    h.rebuilt += "\r\n";
  }
  return h;
}

}  // namespace

size_t RequestFraming::header_end(const std::string& in) {
  // Go's textproto reads a line up to its LF and drops a CR before it: an
  // empty line (LF or CRLF) after the request line ends the header.
  for (size_t pos = 0;;) {
    size_t nl = in.find('\n', pos);
    if (nl == std::string::npos) return nl;
    if (pos > 0 && (nl == pos || (nl == pos + 1 && in[pos] == '\r'))) return nl + 1;
    pos = nl + 1;
  }
}

bool RequestFraming::content_length(const std::string& in, size_t end, size_t* n) {
  static const char kName[] = "\r\ncontent-length:";
  const size_t name_len = sizeof(kName) - 1;
  *n = 0;
  for (size_t i = 0; i + name_len <= end; ++i) {
    if (strncasecmp(in.data() + i, kName, name_len) != 0) continue;
    // Go's parseContentLength: blanks around, then the decimal digits of a
    // value that fits in 63 bits, and nothing else.
    size_t j = i + name_len;
    while (j < end && (in[j] == ' ' || in[j] == '\t')) ++j;
    uint64_t v = 0;
    size_t digits = 0;
    for (; j < end && in[j] >= '0' && in[j] <= '9'; ++j, ++digits) {
      if (v > (uint64_t{INT64_MAX} - 9) / 10) return false;
      v = v * 10 + static_cast<uint64_t>(in[j] - '0');
    }
    while (j < end && (in[j] == ' ' || in[j] == '\t')) ++j;
    if (digits == 0 || j >= end || in[j] != '\r') return false;
    if (v > SIZE_MAX) return false;
    *n = static_cast<size_t>(v);
    return true;
  }
  return true;
}

bool RequestFraming::complete(const std::string& in) {
  size_t end = header_end(in);
  if (end == std::string::npos) return false;
  size_t body = 0;
  content_length(in, end, &body);
  return in.size() - end >= body;
}

void RequestFraming::reset() {
  chunked_.reset();
  head_.clear();
  header_checked_ = false;
}

RequestFraming::Verdict RequestFraming::advance(std::string* in, const char** status) {
  if (!chunked_) {
    size_t end = header_end(*in);
    size_t body = 0;
    if ((end == std::string::npos && in->size() > max_header_bytes_) ||
        (end != std::string::npos && end > max_header_bytes_)) {
      *status = "431 Request Header Fields Too Large";
      return Verdict::kRefuse;
    }
    if (end != std::string::npos && !header_checked_) {
      // In the order Go refuses them (net/http request.go readRequest):
      // the lines (textproto), the framing (readTransfer: transfer coding,
      // then Content-Length), the names (server.go).
      HeaderLines h = read_header_lines(*in, end);
      if (h.malformed) {
        *status = "400 Bad Request";
        return Verdict::kRefuse;
      }
      if (!h.canonical) {
        // What follows (this framing, the HTTP server) reads CRLF lines.
        if (h.rebuilt.size() > max_header_bytes_) {
          *status = "431 Request Header Fields Too Large";
          return Verdict::kRefuse;
        }
        in->replace(0, end, h.rebuilt);
        end = h.rebuilt.size();
      }
      Framing f = framing(*in, end);
      if (f == Framing::kUnsupported) {
        *status = "501 Not Implemented";
        return Verdict::kRefuse;
      }
      // Go (transfer.go fixLength): Content-Length lines that disagree are
      // refused, chunked or not; equal ones are one.
      for (const std::string& v : h.lengths) {
        if (v != h.lengths.front()) {
          *status = "400 Bad Request";
          return Verdict::kRefuse;
        }
      }
      if (f != Framing::kChunked && !content_length(*in, end, &body)) {
        *status = "400 Bad Request";
        return Verdict::kRefuse;
      }
      if (h.name_with_space) {
        *status = "400 Bad Request: invalid header name";
        return Verdict::kRefuse;
      }
      header_checked_ = true;
      if (f == Framing::kChunked) {
        head_ = without_framing(*in, end, /*drop_length=*/true);
        in->erase(0, end);
        chunked_ = std::make_unique<ChunkedBody>(max_body_bytes_);
      } else if (body > max_body_bytes_) {
        *status = "413 Payload Too Large";
        return Verdict::kRefuse;
      } else if (f == Framing::kLengthIgnoredTe) {
        // Dropped, so that the HTTP server behind this does not frame the
        // body by it either (it would read a chunked body we did not bound).
        std::string head = without_framing(*in, end, /*drop_length=*/false);
        head += "\r\n";
        in->replace(0, end, head);
      }
    }
  }
  if (chunked_) {
    ChunkedBody::Status st;
    size_t used = chunked_->feed(*in, &st);
    in->erase(0, used);
    if (st == ChunkedBody::Status::kMalformed) {
      *status = "400 Bad Request";
      return Verdict::kRefuse;
    }
    if (st == ChunkedBody::Status::kTooLarge) {
      *status = "413 Payload Too Large";
      return Verdict::kRefuse;
    }
    if (st == ChunkedBody::Status::kDone) {
      // The request as if it had come with Content-Length; what follows
      // it (a pipelined request) stays behind it.
      std::string& body = chunked_->body();
      std::string framed = std::move(head_);
      framed += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
      framed += body;
      framed += *in;
      *in = std::move(framed);
      head_.clear();
      chunked_.reset();
    }
  }
  if (chunked_ || !complete(*in)) return Verdict::kMore;
  header_checked_ = false;  // the next call reads the next request
  return Verdict::kComplete;
}

}  // namespace etcdq::http
