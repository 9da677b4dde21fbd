#include "http/chunked.h"

#include <algorithm>

namespace etcdq::http {

ChunkedBody::Status ChunkedBody::size_line() {
  std::string_view s(line_);
  // Go: trimTrailingWhitespace, then removeChunkExtension.
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  s = s.substr(0, s.find(';'));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (s.empty() || s.size() > 16) return Status::kMalformed;
  size_t n = 0;
  for (char ch : s) {
    int d;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
    else return Status::kMalformed;
    n = n * 16 + static_cast<size_t>(d);
  }
  line_.clear();
  if (n == 0) {
    state_ = State::kTrailer;
    return Status::kMore;
  }
  if (n > max_body_bytes_ || body_.size() > max_body_bytes_ - n) return Status::kTooLarge;
  left_ = n;
  state_ = State::kData;
  return Status::kMore;
}

size_t ChunkedBody::feed(std::string_view data, Status* status) {
  size_t i = 0;
  *status = Status::kMore;
  while (i < data.size()) {
    switch (state_) {
      case State::kSize:
      case State::kTrailer: {
        size_t lf = data.find('\n', i);
        size_t end = lf == std::string_view::npos ? data.size() : lf;
        line_.append(data.substr(i, end - i));
        if (state_ == State::kTrailer) trailer_bytes_ += end - i + (lf == std::string_view::npos ? 0 : 1);
        i = lf == std::string_view::npos ? data.size() : lf + 1;
        if (line_.size() > kMaxLineBytes || trailer_bytes_ > kMaxTrailerBytes) {
          *status = Status::kMalformed;
          return i;
        }
        if (lf == std::string_view::npos) break;  // the line goes on in the next bytes
        if (state_ == State::kSize) {
          *status = size_line();
          if (*status != Status::kMore) return i;
        } else {
          bool empty = line_.empty() || line_ == "\r";
          line_.clear();
          if (empty) {  // the end of the trailer: the body is complete
            *status = Status::kDone;
            return i;
          }
        }
        break;
      }
      case State::kData: {
        size_t n = std::min(left_, data.size() - i);
        body_.append(data.substr(i, n));
        i += n;
        left_ -= n;
        if (left_ == 0) {
          state_ = State::kDataEnd;
          crlf_seen_ = 0;
        }
        break;
      }
      case State::kDataEnd: {
        // Exactly CRLF after a chunk's data (Go: "malformed chunked encoding").
        if (data[i] != "\r\n"[crlf_seen_]) {
          *status = Status::kMalformed;
          return i;
        }
        ++i;
        if (++crlf_seen_ == 2) state_ = State::kSize;
        break;
      }
    }
  }
  return i;
}

}  // namespace etcdq::http
