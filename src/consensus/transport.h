// libraft's transport (raft_uv_transport) as raw TCP on the peer URL. The
// peer URL has one listener (net/mux.h), shared with the member-only gRPC
// calls (server/peer_server.h): a connection that opens with kMagic is
// libraft's and is handed here (adopt); one that opens with HTTP/2's
// preface goes to the peer gRPC server. Each libuv step below runs on
// libraft's own loop (the consensus thread), so a message crosses no thread
// on its way in or out.
//
// libraft opens one connection per member it sends to and only writes on it;
// the receiving member only reads (uv_send.c / uv_recv.c in libraft 0.15).
//   outgoing: uv_tcp_connect to the member's peer address (a host name is
//             resolved with uv_getaddrinfo), then write the hello below;
//             once it is written, libraft gets the uv_tcp_t itself and
//             writes its messages straight to the socket (no copy, as with
//             libraft's own TCP transport); what waits in libuv's write
//             queue for one member is bounded a level up (consensus/io.h,
//             UvIo::kMaxSendQueueBytes);
//   incoming: the mux thread hands the socket over (adopt); on the loop, a
//             pump (consensus/inbound.h) reads the hello, then reads the socket,
//             checks every byte with consensus/wire_check.h (libraft trusts what
//             it reads) and writes what passed into one end of a
//             socketpair whose other end libraft reads as its accepted
//             stream. The first malformed message cuts the connection
//             (a warning names the member and the remote address) before
//             libraft has all of it; libraft then sees the stream end, as
//             after a TCP error, and Raft resends what was lost.
// Hello (little endian), sent once by the connecting member:
//   "etcdqRFT"  the magic the mux routes on (8 bytes)
//   u64         kVersion
//   u64         the sender's member id (not 0)
//   u64         length of the address field (a multiple of 8, at most
//               kMaxAddressBytes)
//   bytes       the sender's advertised peer host:port, NUL-padded
// as libraft's own TCP handshake names the sender (uv_tcp_connect.c).
//
// Bounds: a pump writes into the socketpair without blocking; while more
// than kMaxQueuedBytes wait there (libraft reads slower than the peer
// sends), it stops reading the socket, and TCP's flow control holds the
// sender. At most kMaxIncoming incoming connections live at once: one more
// closes the one idle longest (libraft reconnects when it next sends, so a
// member's connection always gets back in). One that has not finished its
// hello within the handshake timeout is closed. A connect that has not
// written its hello within the connect timeout fails (libraft retries).
//
// Peer TLS (https:// peer URLs, host/tls.h): the peer URL's listener
// is a net::TlsListener: only TLS records are taken, and net/tls_pump.h
// terminates them with a net::TlsContext built from the --peer-* flags,
// verifies the member's certificate (peer CA, allowed CN or host name),
// and only then routes the plaintext by its first bytes: kMagic to adopt()
// (so the hello and every check below see decrypted bytes from a verified
// member), HTTP/2's preface to the peer gRPC server. Plaintext, the magic
// included, is closed unread. Outgoing, Options::tls_dial is set: once TCP
// connected, the socket goes to the TLS pump's client side
// (net::TlsPump::dial, the dialed host checked against the member's
// certificate), libraft gets one end of a socketpair whose first bytes are
// the hello, and the pump carries both inside TLS. The TLS work runs on
// the pump's threads, not on this loop; its buffers, handshake timeout and
// refusal logs are the pump's (16 KiB each way a connection, 10 s,
// rate-limited). A handshake that fails after the hello went into the
// socketpair ends the stream libraft writes to, and libraft reconnects as
// after a TCP error.
//
// Thread-safety: raw()'s callbacks and everything else run on the loop
// thread; adopt() may be called from any thread (it posts to the loop,
// consensus/uv_bridge.h).
#pragma once

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <uv.h>

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace etcdq::consensus {

class PeerTransport {
 public:
  static constexpr std::string_view kMagic{"etcdqRFT", 8};
  static constexpr uint64_t kVersion = 1;
  // A peer address in a hello longer than this is refused.
  static constexpr size_t kMaxAddressBytes = 512;
  // Incoming connections at once (libraft needs one per member that sends
  // to us): each holds three descriptors (the socket and a socketpair), a
  // socketpair's kernel buffers (4 MiB each way) and up to kMaxQueuedBytes.
  static constexpr size_t kMaxIncoming = 64;
  // Checked bytes waiting for libraft's loop to read them, per connection.
  static constexpr size_t kMaxQueuedBytes = 4 << 20;

  struct Options {
    // An incoming connection's hello must be complete within this.
    std::chrono::milliseconds handshake_timeout{5000};
    // An outgoing connection's TCP connect and hello within this.
    std::chrono::milliseconds connect_timeout{1000};
    // Peer TLS: set, every outgoing connection goes through it once TCP
    // connected: it takes the socket `tcp` (dialed to `host`) and `plain`,
    // one end of a socketpair, and runs TLS between them
    // (net::TlsPump::dial); the hello is written into the socketpair's
    // other end, which libraft gets. Unset: plain TCP.
    std::function<void(int tcp, int plain, const std::string& host)> tls_dial;
  };

  PeerTransport(uv_loop_t* loop, Options opts);
  explicit PeerTransport(uv_loop_t* loop) : PeerTransport(loop, Options{}) {}
  ~PeerTransport();
  PeerTransport(const PeerTransport&) = delete;
  PeerTransport& operator=(const PeerTransport&) = delete;

  // What raft_uv_init takes. Valid while this object lives; libraft must
  // have closed it (raft_close completed) before this object is destroyed.
  struct raft_uv_transport* raw();

  // Any thread: takes a connected socket that opened with kMagic (the mux
  // peeked at it and consumed nothing). Closed at once when libraft does
  // not listen (not yet, or any more).
  void adopt(int fd);

  // The hello a member with `id` and peer `address` sends (exposed for
  // tests, which speak the protocol by hand).
  static std::string hello(raft_id id, const std::string& address);

  // Loop thread, for tests: incoming connections alive now.
  size_t incoming() const;

  // Loop thread (before libraft listens, or on it): who may send to
  // libraft. A hello naming an id `accepts` refuses is closed with a
  // warning, as etcd's rafthttp refuses a stream from a member it does not
  // know. Without one, every well-formed hello is taken.
  void set_sender_filter(std::function<bool(raft_id)> accepts);

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace etcdq::consensus
