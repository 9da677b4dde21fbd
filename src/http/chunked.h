// A request body sent with "Transfer-Encoding: chunked" (RFC 9112 section
// 7.1), decoded as it arrives, as Go's net/http does for etcd's gateway
// (net/http/internal/chunked.go): each chunk is a hex size line (chunk
// extensions after ';' ignored, trailing blanks trimmed, a bare LF taken
// for CRLF), the size's bytes and a CRLF; a size of 0 ends the body, after
// which trailer lines up to an empty line are read and dropped.
//
// Bounds: the decoded body is at most `max_body_bytes` (the bound a body
// with Content-Length has, connections.h), a size line at most 4096 bytes
// (Go's maxLineLength), a size at most 16 hex digits, the trailer at most
// kMaxTrailerBytes. Anything else is malformed.
//
// Thread-safety: none; one connection's epoll thread feeds it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace etcdq::http {

class ChunkedBody {
 public:
  static constexpr size_t kMaxLineBytes = 4096;
  static constexpr size_t kMaxTrailerBytes = 64 << 10;
  enum class Status {
    kMore,       // everything given was taken; the body goes on
    kDone,       // the body and its trailer ended; the rest is the next request
    kMalformed,  // not chunked encoding (400)
    kTooLarge,   // the body grew past max_body_bytes (413)
  };

  explicit ChunkedBody(size_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}

  // Takes a prefix of `data` (all of it unless the body ended within it),
  // returns how many bytes. Once the status is not kMore, feed no more.
  size_t feed(std::string_view data, Status* status);
  // The decoded body so far (all of it once kDone).
  std::string& body() { return body_; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer };
  Status size_line();  // `line_` holds one size line, without its LF

  size_t max_body_bytes_;
  State state_ = State::kSize;
  std::string line_;       // the line being read (size or trailer)
  size_t left_ = 0;        // kData: bytes of the chunk still to come
  size_t crlf_seen_ = 0;   // kDataEnd: how much of the chunk's CRLF arrived
  size_t trailer_bytes_ = 0;
  std::string body_;
};

}  // namespace etcdq::http
