// What the client of one TLS connection sent, decrypted, on its way from
// SSL_read to the route's socket (tls_pump.h). First the bytes the route is
// picked by gather here (at most H2Guard::kPrefaceBytes, enough for the
// HTTP/2 preface and every magic: mux.h's pick_route); then each read
// fills the buffer anew once all of the last one was sent. An HTTP/2
// client's bytes pass its guard (h2_guard.h) from the connection's first
// byte on, and only what passed is sent on; what the guard holds waits
// here (the pump reads nothing more meanwhile, so TCP's flow control stops
// the client).
//
// Bytes in, bytes out, no socket: tls_pump.cc reads and writes around it,
// and fuzz/fuzz_tls_pump.cc feeds it anything.
//
// Bounds: `capacity` bytes (one TLS record's plaintext is 16 KiB).
// Thread-safety: none; the connection's pump thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "net/h2_guard.h"

namespace etcdq::net {

class PumpInbound {
 public:
  using Clock = H2Guard::Clock;
  explicit PumpInbound(size_t capacity) : capacity_(capacity), buf_(new char[capacity]) {}

  // Before routing: where the next of the first bytes go, and how many
  // more routing may look at; got_first() counts those read.
  char* first_space() { return buf_.get() + len_; }
  size_t first_room() const { return H2Guard::kPrefaceBytes - len_; }
  void got_first(size_t n) { len_ += n; }
  std::string_view first() const { return {buf_.get(), len_}; }
  // The route is picked: with `guard` (HTTP/2), every byte from the first
  // on passes it before it is sent; without, everything passes.
  void routed(std::unique_ptr<H2Guard> guard) {
    guard_ = std::move(guard);
    ok_ = guard_ ? 0 : len_;
  }
  H2Guard* guard() const { return guard_.get(); }

  // Everything read was sent: the next read may come, into space()
  // (capacity() bytes); got() counts it.
  bool empty() const { return len_ == 0; }
  char* space() { return buf_.get(); }
  size_t capacity() const { return capacity_; }
  void got(size_t n) {
    off_ = 0;
    len_ = n;
    ok_ = guard_ ? 0 : n;
  }

  // Bytes read that the guard has not passed yet.
  bool unchecked() const { return ok_ < len_; }
  enum class Verdict {
    kPassed,   // all of them
    kHeld,     // some wait until *resume_at (check again then)
    kRefused,  // the guard refused the connection: close it (guard()->why())
  };
  // Offers them to the guard at `now`.
  Verdict check(Clock::time_point now, Clock::time_point* resume_at) {
    ok_ += guard_->admit(buf_.get() + ok_, len_ - ok_, now, resume_at);
    if (guard_->refused()) return Verdict::kRefused;
    return ok_ < len_ ? Verdict::kHeld : Verdict::kPassed;
  }

  // What passed and was not sent yet; sent() counts what the route's
  // socket took.
  std::string_view sendable() const { return {buf_.get() + off_, ok_ - off_}; }
  void sent(size_t n) {
    off_ += n;
    if (off_ == len_) off_ = len_ = ok_ = 0;
  }

 private:
  size_t capacity_;
  std::unique_ptr<char[]> buf_;
  // [off_, len_) is what is left to send, of which [off_, ok_) passed.
  size_t off_ = 0, len_ = 0, ok_ = 0;
  std::unique_ptr<H2Guard> guard_;
};

}  // namespace etcdq::net
