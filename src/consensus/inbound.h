// One incoming libraft connection on the peer URL (consensus/transport.h): the
// pump between the TCP socket a member sends on and the socketpair libraft
// reads. It reads the sender's hello, then checks every byte it reads
// (consensus/wire_check.h) and writes what passed into the socketpair, without
// blocking: while more than PeerTransport::kMaxQueuedBytes wait for libraft,
// it stops reading the socket. It ends (and frees itself) when either side
// closes, a hello or a message is malformed (a warning says why), or its
// owner closes it.
//
// Thread-safety: loop thread only (libraft's loop).
#pragma once

extern "C" {
#include <raft.h>
}
#include <uv.h>

#include <cstdint>
#include <string>

#include "consensus/wire_check.h"

namespace prometheus {
class Counter;
}

namespace etcdq::consensus {

class Inbound {
 public:
  // What a pump needs from its transport; loop thread.
  struct Host {
    // The hello named the sender: libraft gets `fd` as the stream it reads
    // (or `fd` is closed when libraft does not listen). False when the
    // sender is refused (not in the configuration; `fd` closed).
    virtual bool hand_to_libraft(raft_id from, const std::string& address, int fd) = 0;
    // The pump closed and is about to free itself.
    virtual void gone(Inbound* in) = 0;
    // Scratch space for one read (shared: a read's bytes are consumed
    // before the callback returns).
    virtual uv_buf_t read_buffer() = 0;

   protected:
    ~Host() = default;
  };

  // Starts pumping the connected socket `fd` (owned from here on). Null if
  // libuv refuses it (then `fd` is closed).
  static Inbound* start(uv_loop_t* loop, Host* host, int fd);

  // Closes both sides; `why` is logged as a warning when not empty. The
  // object is freed once libuv closed its handles (Host::gone first).
  // Idempotent.
  void close(const std::string& why);

  // Still reading the hello (the transport times these out).
  bool in_hello() const { return stage_ == Stage::kHello; }
  // The sender, once its hello was accepted (handed to libraft); 0 before,
  // or when it was refused.
  raft_id accepted_from() const { return accepted_ ? from_ : 0; }
  // uv_now() when it was adopted, and when it last read something.
  uint64_t started_ms() const { return started_ms_; }
  uint64_t active_ms() const { return active_ms_; }

 private:
  Inbound(uv_loop_t* loop, Host* host) : loop_(loop), host_(host) {}
  ~Inbound() = default;

  struct Write;
  static constexpr size_t kHelloFixed = 32;  // magic, version, id, address length

  void on_read(ssize_t n, const uv_buf_t* buf);
  void read_hello(size_t n);
  bool open_pipe();
  void deliver(const char* data, size_t n);
  void written(Write* w, int status);
  void handle_closed();
  std::string who() const;

  uv_loop_t* loop_;
  Host* host_;
  uv_tcp_t tcp_{};
  uv_pipe_t pipe_{};  // our end of the socketpair (we write, libraft reads the other)
  int open_handles_ = 0;
  enum class Stage { kHello, kStreaming, kClosed } stage_ = Stage::kHello;
  char hello_[kHelloFixed + 512];  // the hello so far (512: PeerTransport::kMaxAddressBytes)
  size_t hello_have_ = 0;
  size_t hello_need_ = kHelloFixed;
  raft_id from_ = 0;
  bool accepted_ = false;
  std::string address_;     // the sender's advertised peer address
  std::string remote_;      // where it connected from
  WireCheck check_;
  size_t queued_ = 0;       // checked bytes in writes libuv has not finished
  bool paused_ = false;     // reading the socket stopped: too much queued
  char eof_probe_[8];       // the pipe is read only to learn libraft closed it
  uint64_t started_ms_ = 0;
  uint64_t active_ms_ = 0;
  prometheus::Counter* received_ = nullptr;  // etcd_network_peer_received_bytes_total{From}, once streaming
};

// Logs a warning about an incoming Raft connection, at most 100 per 10 s
// (common/log_limiter.h): the next one says how many were left out.
void warn_peer_connection(const std::string& what);

}  // namespace etcdq::consensus
