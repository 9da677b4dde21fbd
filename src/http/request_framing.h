// Where one HTTP/1.1 request ends in what a connection received
// (connections.h): its header up to the blank line, then the body its
// Content-Length announces, or a chunked body decoded as it arrives
// (chunked.h) and handed on framed by Content-Length. Bytes in, a verdict
// out; no socket: connections.cc feeds it what it read, and
// fuzz/fuzz_http_framing.cc feeds it anything.
//
// Transfer-Encoding as Go's net/http reads it (transfer.go,
// parseTransferEncoding): one "chunked" is decoded here (and drops the
// request's own Content-Length); an HTTP/1.0 request's is ignored and
// dropped, as Go ignores it, so that nothing after this reads it either;
// anything else is refused (501, Go's "Unsupported transfer encoding").
//
// The header as Go's net/http reads it (net/textproto reader.go, net/http
// request.go and server.go readRequest), refused as Go refuses it:
//   - lines end in CRLF or a bare LF; a line that starts with a blank
//     continues the one before (obs-fold). A request with either is handed
//     on rewritten in CRLF lines, folds joined by a space;
//   - a line without a colon, an empty name or one with a byte that is not
//     a token byte, a control byte in a value, a first header line that
//     starts with a blank, an empty request line: 400 "400 Bad Request";
//   - Content-Length lines that disagree (blanks trimmed; equal ones are
//     one), or one that is not a decimal number below 2^63 with blanks
//     around: 400 (a chunked request's Content-Length is dropped unread,
//     but it too may not disagree);
//   - a name with a space in it ("Transfer-Encoding : chunked"; textproto
//     keeps it, net/http refuses it after the framing checks): 400
//     "400 Bad Request: invalid header name".
// Before, conflicting lengths framed the request by the first while the
// server behind read the last, so the body ran as a hidden request. Not
// checked here: Go's Host rules ("missing required Host header").
//
// Bounds: a header over `max_header_bytes` is refused (431), also once
// rewritten in CRLF lines; a body over `max_body_bytes` (413), a malformed
// chunked body (400).
//
// Thread-safety: none; one connection's epoll thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "http/chunked.h"

namespace etcdq::http {

class RequestFraming {
 public:
  enum class Verdict {
    kMore,      // the request is not complete yet: read more
    kComplete,  // `in` starts with a whole request framed by Content-Length
    kRefuse,    // answer *status and close
  };

  RequestFraming(size_t max_header_bytes, size_t max_body_bytes)
      : max_header_bytes_(max_header_bytes), max_body_bytes_(max_body_bytes) {}

  // Looks at `in`, the bytes received and not yet served; once it returned
  // kComplete, the caller takes that request out of `in` before the next
  // call. While a chunked
  // body is decoded, takes the bytes it decoded out of `in` and keeps them;
  // once the body ended, puts the request back at the front of `in`
  // (framed by Content-Length, what followed it behind). A header without
  // Transfer-Encoding stays in `in` as it came (but for the CRLF rewrite
  // above), but an HTTP/1.0 request's Transfer-Encoding lines are dropped.
  // On kRefuse, *status is the status line's code and reason ("400 Bad
  // Request", "400 Bad Request: invalid header name").
  Verdict advance(std::string* in, const char** status);
  // A chunked body is being decoded (its bytes left `in`).
  bool decoding_chunks() const { return chunked_ != nullptr; }
  // Forgets a chunked body in progress (the connection answered and closes).
  void reset();

  // Where the header of `in` ends (past its blank line: an empty line, LF
  // or CRLF, after the request line), or npos.
  static size_t header_end(const std::string& in);
  // The Content-Length the header (CRLF lines, up to `end`) announces, 0
  // when none; false when it is not a decimal number below 2^63 with
  // blanks around.
  static bool content_length(const std::string& in, size_t end, size_t* n);
  // `in` starts with a whole request: its header, and as many bytes after
  // it as its Content-Length says.
  static bool complete(const std::string& in);

 private:
  size_t max_header_bytes_, max_body_bytes_;
  // A chunked request body being decoded: its header (framing headers
  // left out) waits in `head_` while `in` holds the bytes not yet decoded.
  std::unique_ptr<ChunkedBody> chunked_;
  std::string head_;
  // The header of the request at the front of `in` passed the checks
  // above (and was rewritten if it had to be): its body is arriving.
  bool header_checked_ = false;
};

}  // namespace etcdq::http
