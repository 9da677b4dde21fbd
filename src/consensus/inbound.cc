#include "consensus/inbound.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/log_limiter.h"
#include "common/socket_address.h"
#include "consensus/metrics.h"
#include "consensus/transport.h"

namespace etcdq::consensus {
namespace {

// Socketpair buffers: a whole AppendEntries batch fits, so libraft reads it
// in one wakeup (AF_UNIX's default is 208 KiB; the kernel caps this at
// net.core.wmem_max).
constexpr int kSocketBufferBytes = 4 << 20;

uint64_t le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

// A write libuv could not finish at once: owns a copy of the bytes.
struct Inbound::Write {
  uv_write_t req{};
  Inbound* owner;
  std::string data;
};

Inbound* Inbound::start(uv_loop_t* loop, Host* host, int fd) {
  auto* in = new Inbound(loop, host);
  in->started_ms_ = in->active_ms_ = uv_now(loop);
  // Peer TLS hands over the plaintext end of a socketpair (net/tls_pump.h
  // logs the member's address when it refuses one).
  in->remote_ = common::remote_address(fd, "the peer TLS listener");
  uv_tcp_init(loop, &in->tcp_);
  in->tcp_.data = in;
  in->open_handles_ = 1;
  if (uv_tcp_open(&in->tcp_, fd) != 0) {
    ::close(fd);
    in->close("");
    return nullptr;
  }
  uv_tcp_nodelay(&in->tcp_, 1);
  int rv = uv_read_start(
      reinterpret_cast<uv_stream_t*>(&in->tcp_),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* self = static_cast<Inbound*>(h->data);
        if (self->stage_ == Stage::kHello) {
          // Exactly what the hello still lacks: nothing after it is read
          // before the wire check is in place.
          *buf = uv_buf_init(self->hello_ + self->hello_have_,
                             static_cast<unsigned>(self->hello_need_ - self->hello_have_));
          return;
        }
        *buf = self->host_->read_buffer();
      },
      [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) { static_cast<Inbound*>(s->data)->on_read(n, buf); });
  if (rv != 0) {
    in->close("");
    return nullptr;
  }
  return in;
}

std::string Inbound::who() const {
  if (from_ == 0) return "a peer connected from " + remote_;
  return fmt::format("member {:x} ({}, connected from {})", from_, address_, remote_);
}

void Inbound::on_read(ssize_t n, const uv_buf_t* buf) {
  if (stage_ == Stage::kClosed) return;
  if (n < 0) {
    // The sender closed (or reset) the connection: the normal end, except
    // in the middle of a hello.
    close(stage_ == Stage::kHello && hello_have_ > 0 ? "Raft connection from " + who() + " ended inside its hello"
                                                      : "");
    return;
  }
  if (n == 0) return;
  active_ms_ = uv_now(loop_);
  if (stage_ == Stage::kHello) {
    read_hello(static_cast<size_t>(n));
    return;
  }
  if (!check_.feed(std::string_view(buf->base, static_cast<size_t>(n)))) {
    close("dropped the Raft connection from " + who() + ": " + check_.error());
    return;
  }
  if (received_ != nullptr) received_->Increment(static_cast<double>(n));
  deliver(buf->base, static_cast<size_t>(n));
}

void Inbound::read_hello(size_t n) {
  static_assert(sizeof hello_ >= kHelloFixed + PeerTransport::kMaxAddressBytes);
  // The bytes were read in place (see the alloc callback in start).
  hello_have_ += n;
  if (hello_have_ < hello_need_) return;
  const char* p = hello_;
  if (hello_need_ == kHelloFixed) {
    if (std::string_view(p, 8) != PeerTransport::kMagic) {
      close("dropped a Raft connection from " + remote_ + ": bad magic");
      return;
    }
    uint64_t version = le64(p + 8), id = le64(p + 16), len = le64(p + 24);
    if (version != PeerTransport::kVersion) {
      close(fmt::format("dropped a Raft connection from {}: protocol version {} (this member speaks {})", remote_,
                        version, PeerTransport::kVersion));
      return;
    }
    if (id == 0 || len == 0 || len % 8 != 0 || len > PeerTransport::kMaxAddressBytes) {
      close(fmt::format("dropped a Raft connection from {}: bad hello (member id {:x}, address length {})", remote_, id,
                        len));
      return;
    }
    from_ = id;
    hello_need_ = kHelloFixed + len;
    return;
  }
  address_.assign(p + kHelloFixed, ::strnlen(p + kHelloFixed, hello_need_ - kHelloFixed));
  if (address_.empty()) {
    close("dropped the Raft connection from " + who() + ": no address in its hello");
    return;
  }
  if (!open_pipe()) {
    close("cannot hand the Raft connection from " + who() + " to libraft: " + std::strerror(errno));
    return;
  }
  stage_ = Stage::kStreaming;
}

bool Inbound::open_pipe() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
  for (int fd : fds) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBufferBytes, sizeof kSocketBufferBytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBufferBytes, sizeof kSocketBufferBytes);
  }
  uv_pipe_init(loop_, &pipe_, 0);
  pipe_.data = this;
  ++open_handles_;
  if (uv_pipe_open(&pipe_, fds[1]) != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    errno = EMFILE;
    return false;
  }
  // libraft never writes: a read that ends tells us it closed its end.
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&pipe_),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* self = static_cast<Inbound*>(h->data);
        *buf = uv_buf_init(self->eof_probe_, sizeof self->eof_probe_);
      },
      [](uv_stream_t* s, ssize_t n, const uv_buf_t*) {
        if (n < 0) static_cast<Inbound*>(s->data)->close("");
      });
  accepted_ = host_->hand_to_libraft(from_, address_, fds[0]);
  // Counted once the sender filter let it in (hand_to_libraft closes it if not).
  if (accepted_ && stage_ != Stage::kClosed) received_ = &peer_received_bytes(from_);
  return true;
}

void Inbound::deliver(const char* data, size_t n) {
  auto* stream = reinterpret_cast<uv_stream_t*>(&pipe_);
  if (queued_ == 0) {
    uv_buf_t b = uv_buf_init(const_cast<char*>(data), static_cast<unsigned>(n));
    int w = uv_try_write(stream, &b, 1);
    if (w == static_cast<int>(n)) return;
    if (w < 0 && w != UV_EAGAIN) {
      close("");  // libraft closed its end
      return;
    }
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
    }
  }
  auto* wr = new Write{{}, this, std::string(data, n)};
  wr->req.data = wr;
  uv_buf_t b = uv_buf_init(wr->data.data(), static_cast<unsigned>(wr->data.size()));
  if (uv_write(&wr->req, stream, &b, 1, [](uv_write_t* r, int status) {
        auto* w = static_cast<Write*>(r->data);
        w->owner->written(w, status);
      }) != 0) {
    delete wr;
    close("");
    return;
  }
  queued_ += n;
  if (queued_ > PeerTransport::kMaxQueuedBytes && !paused_) {
    // libraft reads slower than the peer sends: TCP holds the peer back.
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
    paused_ = true;
  }
}

void Inbound::written(Write* w, int status) {
  queued_ -= w->data.size();
  delete w;
  if (stage_ == Stage::kClosed) return;
  if (status != 0) {
    close("");
    return;
  }
  if (paused_ && queued_ <= PeerTransport::kMaxQueuedBytes / 2) {
    paused_ = false;
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(&tcp_),
        [](uv_handle_t* h, size_t, uv_buf_t* buf) { *buf = static_cast<Inbound*>(h->data)->host_->read_buffer(); },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) { static_cast<Inbound*>(s->data)->on_read(n, buf); });
  }
}

void warn_peer_connection(const std::string& what) {
  // A remote party can open and drop connections in a loop.
  static LogLimiter limiter(100, std::chrono::seconds(10));
  uint64_t left_out = 0;
  if (!limiter.allow(&left_out)) return;
  if (left_out == 0) {
    spdlog::warn("{}", what);
  } else {
    spdlog::warn("{} (and {} more Raft connection warnings left out)", what, left_out);
  }
}

void Inbound::close(const std::string& why) {
  if (stage_ == Stage::kClosed) return;
  stage_ = Stage::kClosed;
  if (!why.empty()) warn_peer_connection(why);
  auto closed = [](uv_handle_t* h) { static_cast<Inbound*>(h->data)->handle_closed(); };
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), closed);
  if (open_handles_ == 2) uv_close(reinterpret_cast<uv_handle_t*>(&pipe_), closed);
}

void Inbound::handle_closed() {
  if (--open_handles_ > 0) return;
  host_->gone(this);
  delete this;
}

}  // namespace etcdq::consensus
