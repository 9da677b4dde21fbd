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
// Bounds: a header over `max_header_bytes` is refused (431), a body over
// `max_body_bytes` (413), a Content-Length that is not a number or a
// malformed chunked body (400).
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

  // Looks at `in`, the bytes received and not yet served. While a chunked
  // body is decoded, takes the bytes it decoded out of `in` and keeps them;
  // once the body ended, puts the request back at the front of `in`
  // (framed by Content-Length, what followed it behind). A header without
  // Transfer-Encoding stays in `in` as it came, but an HTTP/1.0 request's
  // Transfer-Encoding lines are dropped. On kRefuse, *status is the status
  // line's code and reason ("400 Bad Request").
  Verdict advance(std::string* in, const char** status);
  // A chunked body is being decoded (its bytes left `in`).
  bool decoding_chunks() const { return chunked_ != nullptr; }
  // Forgets a chunked body in progress (the connection answered and closes).
  void reset();

  // Where the header of `in` ends (past its blank line), or npos.
  static size_t header_end(const std::string& in);
  // The Content-Length the header (up to `end`) announces, 0 when none;
  // false when it is not a number.
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
};

}  // namespace etcdq::http
