#include "http/request_framing.h"

#include <strings.h>

#include <cstdint>

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

}  // namespace

size_t RequestFraming::header_end(const std::string& in) {
  size_t p = in.find("\r\n\r\n");
  return p == std::string::npos ? p : p + 4;
}

bool RequestFraming::content_length(const std::string& in, size_t end, size_t* n) {
  static const char kName[] = "\r\ncontent-length:";
  const size_t name_len = sizeof(kName) - 1;
  *n = 0;
  for (size_t i = 0; i + name_len <= end; ++i) {
    if (strncasecmp(in.data() + i, kName, name_len) != 0) continue;
    size_t j = i + name_len;
    while (j < end && (in[j] == ' ' || in[j] == '\t')) ++j;
    size_t v = 0;
    size_t digits = 0;
    for (; j < end && in[j] >= '0' && in[j] <= '9'; ++j, ++digits) {
      if (v > (SIZE_MAX - 9) / 10) return false;
      v = v * 10 + static_cast<size_t>(in[j] - '0');
    }
    if (digits == 0) return false;
    *n = v;
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
    if (end != std::string::npos) {
      Framing f = framing(*in, end);
      if (f == Framing::kUnsupported) {
        *status = "501 Not Implemented";
        return Verdict::kRefuse;
      }
      if (f == Framing::kChunked) {
        head_ = without_framing(*in, end, /*drop_length=*/true);
        in->erase(0, end);
        chunked_ = std::make_unique<ChunkedBody>(max_body_bytes_);
      } else if (!content_length(*in, end, &body)) {
        *status = "400 Bad Request";
        return Verdict::kRefuse;
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
  return !chunked_ && complete(*in) ? Verdict::kComplete : Verdict::kMore;
}

}  // namespace etcdq::http
