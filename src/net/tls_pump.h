// TLS termination for the https:// client URLs and peer URLs:
// the listener's net::Mux hands every connection that opens with a TLS
// record ("\x16\x03", kTlsMagic) to adopt(); the pump runs the handshake
// with OpenSSL (net/tls_context.h), reads the first plaintext bytes, and
// routes them exactly as the Mux routes a plain connection: HTTP/2's
// preface to gRPC, anything else to the HTTP/1.1 server. The route gets one
// end of a socketpair (AF_UNIX); the pump copies between the other end and
// the SSL connection for the connection's life.
//
// Why not gRPC's own TLS: gRPC's SslServerCredentials need a port of their
// own (HTTP/1.1 could not share it, as etcd's client URLs share theirs),
// cannot take an accepted fd with TLS (AddInsecureChannelFromFd is
// plaintext only), and gRPC 1.51's credentials cannot set the cipher suites
// or TLS versions etcd's flags set. cpp-httplib's TLS would be a third
// stack. One OpenSSL termination serves both.
//
// On the peer URL the plaintext may also open with a prefixed route's magic
// (libraft's connections, consensus/transport.h): that route gets it, as
// net::Mux routes a plain connection. So every check of what a member says
// comes after its certificate was verified (and passed allowed-cn /
// allowed-hostname, TlsContext::check_identity).
//
// Dialing (peer URLs): dial() runs the client side of TLS for a TCP
// connection this process made, pumping between it and a plaintext socket
// the caller already holds the other end of; the server's certificate is
// verified against the host dialed. Same threads, buffers, handshake
// timeout and logs as accepted connections.
//
// HTTP/2 guard: on every accepted connection routed to `http2`, what the
// client sends passes net/h2_guard.h before gRPC reads it, and what gRPC
// answers is shown to it (plaintext connections get the same guard inside
// gRPC's reads: net/grpc_fd_guard.h).
//
// Threads: kThreads epoll threads (connections spread round-robin), each
// running non-blocking SSL for its connections, edge-triggered on both
// sockets; a busy connection yields to the others after kBurst steps.
//
// Bounds: a connection buffers at most kBufferBytes each way (a peer that
// does not read stops the pump reading the other side, and TCP's flow
// control holds the sender); OpenSSL's record buffers are released while
// idle. A connection that has not finished its handshake and said which
// protocol it speaks within kHandshakeTimeout is closed; at most
// kMaxHandshaking per thread wait (one more closes the oldest, as the Mux
// does). Handshake failures are logged as etcd's "rejected connection"
// warnings, at most kRejectLogsPerSecond a second per thread.
//
// Client identity: with client-cert-auth, the verified certificate's
// subject Common Name is kept per connection; peer_common_name(fd) answers
// it for the fd a route was handed (the socketpair end) while the
// connection lives. etcd uses that CN as the user when the request carries
// no token (etcdserver/v3_server.go AuthInfoFromCtx ->
// AuthStore.AuthInfoFromTLS); gRPC 1.51 names a connection given to
// AddInsecureChannelFromFd "fd:N" (ServerContext::peer()), which
// server/context.cc parses to ask peer_common_name(N).
//
// Thread-safety: start() then adopt() from any thread, then stop() from the
// owner; routes run on the pump threads and must not block.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "net/tls_context.h"

namespace etcdq::net {

class TlsPump {
 public:
  // Takes ownership of the plaintext end (non-blocking AF_UNIX socket).
  using Route = std::function<void(int fd)>;
  struct Prefixed {
    std::string magic;  // non-empty, and not a prefix of HTTP/2's preface
    Route route;
  };
  struct Routes {
    Route http2;  // gRPC
    Route http1;  // empty: closed (HTTP moved to --listen-client-http-urls)
    std::vector<Prefixed> prefixed;  // looked at first
  };

  static constexpr std::string_view kTlsMagic{"\x16\x03", 2};  // a handshake record
  static constexpr size_t kBufferBytes = 16 * 1024;  // each way, a TLS record's plaintext
  static constexpr std::chrono::seconds kHandshakeTimeout{10};
  static constexpr size_t kMaxHandshaking = 1024;
  static constexpr int kThreads = 2;
  static constexpr int kBurst = 64;
  static constexpr int kRejectLogsPerSecond = 5;

  TlsPump(std::shared_ptr<TlsContext> context, Routes routes, std::string role = "client");
  ~TlsPump();  // stop()
  TlsPump(const TlsPump&) = delete;
  TlsPump& operator=(const TlsPump&) = delete;

  Error start();
  // Takes ownership of an accepted TCP socket (non-blocking) whose first
  // bytes are a TLS record.
  void adopt(int fd);
  // Takes ownership of a connected TCP socket `tcp` this process dialed
  // to `host` (a name or an IP: the server's certificate must be valid
  // for it) and of `plain`, one end of a socketpair (non-blocking): the
  // client side of TLS runs on `tcp` with the context's client context
  // (TlsOptions::dial), and what the caller writes to the other end goes
  // out encrypted. Either side closing, or a failed handshake (logged as a
  // rejected connection), closes both. Any thread, after start().
  void dial(int tcp, int plain, const std::string& host);
  // No route is called after this returns (one running finishes first);
  // connections that finish their handshake later are closed. Live routed
  // connections go on pumping, so their servers can end them.
  void stop_routing();
  // Closes every connection and joins the threads.
  void stop();

  // The verified client certificate's CN of the live TLS connection (of
  // any pump) whose plaintext end `fd` went to a route; "" when none (no
  // client certificate, or no such connection). Any thread.
  static std::string peer_common_name(int fd);

  // A connection on a TLS port that does not open with a TLS record:
  // closed, as etcd 3.4 closes it (curl sees "Empty reply from server"),
  // with etcd's "first record does not look like a TLS handshake" warning
  // (rate-limited). Any thread.
  static void reject_plaintext(int fd, const std::string& role);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace etcdq::net
