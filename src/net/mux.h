// One listening port, several protocols, as etcd serves its client URLs
// (etcd's embed/serve.go puts gRPC and HTTP/1.1 on one listener with cmux):
// each accepted connection is routed by its first bytes. One that opens with
// a prefixed route's magic goes to that route (the peer URL: libraft's raw
// connections, consensus/transport.h); one that opens with HTTP/2's client
// connection preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", RFC 9113 section
// 3.4, which every gRPC client sends before anything else) to the HTTP/2
// route (gRPC); anything else to the HTTP/1.1 route (health, version,
// metrics, the JSON gateway).
//
// Routing reads nothing: the first bytes are peeked (MSG_PEEK), so the
// server a connection is handed to reads it from its first byte. Waiting
// for them costs no thread: one epoll thread accepts and waits for every
// connection's first bytes, edge-triggered, so a client that sends part of
// the preface and stops is woken for again only when more arrives.
//
// Bounds: at most kMaxPending connections wait for their first bytes (a new
// one closes the one that has waited longest, so a fresh client always gets
// in); one that has not said which protocol it speaks within kSniffTimeout
// is closed. Once routed, a connection is its server's to bound. No
// connection takes a descriptor at or past connection_fd_ceiling(): the
// last ones (an eighth of RLIMIT_NOFILE, 256 to 8192) stay for the
// member's own files and peers, so a flood of idle connections cannot make
// RocksDB fail to open a file (which would stop its writes); past it, new
// connections wait in the listen backlog as when descriptors run out.
//
// Thread-safety: listen() and start() from one thread, before stop(); the
// routes run on the mux thread and must not block (they hand the socket
// over). stop() from the owner, once or more.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"

namespace etcdq::net {

class Mux {
 public:
  // Takes ownership of a connected socket (non-blocking).
  using Route = std::function<void(int fd)>;
  // A connection whose first bytes are `magic` (non-empty, and not a
  // prefix of HTTP/2's preface or of another route's magic).
  struct Prefixed {
    std::string magic;
    Route route;
  };
  struct Routes {
    Route http2;  // gRPC
    Route http1;  // empty: such connections are closed (--listen-client-http-urls moved HTTP elsewhere)
    std::vector<Prefixed> prefixed;  // looked at before the others
  };

  static constexpr size_t kMaxPending = 1024;
  static constexpr int64_t kMinFdReserve = 256, kMaxFdReserve = 8192;
  // The lowest descriptor number no accepted connection may have (read
  // once from RLIMIT_NOFILE: call it after raising the limit, as main does).
  static int connection_fd_ceiling();
  static constexpr std::chrono::seconds kSniffTimeout{10};

  // `role` names the listener in errors and logs ("client", "peer").
  explicit Mux(Routes routes, std::string role = "client");
  ~Mux();  // stop()
  Mux(const Mux&) = delete;
  Mux& operator=(const Mux&) = delete;

  // Binds and listens on each (host, port). Errors name the address and
  // the system's reason (address in use, ...). Nothing is accepted before
  // start().
  Error listen(const std::vector<std::pair<std::string, int>>& addresses);
  // Starts the mux thread.
  Error start();
  // Closes the listeners and every connection not yet routed; joins the
  // thread. Routed connections are left to their servers.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What the first bytes of a connection say: more bytes are needed, HTTP/2
// (gRPC), or something else (HTTP/1.1). Exposed for tests.
enum class Sniffed { kNeedMore, kHttp2, kOther };
Sniffed sniff(const char* data, size_t n);

// The route the first `n` bytes of a connection pick, for the Mux and for
// the plaintext of a TLS connection alike (tls_pump.h): the first of
// `prefixed` (anything with a `magic` string) whose magic they start with
// (*which: its index), else HTTP/2 for its preface, else HTTP/1.1; more
// bytes are needed while they could still start a magic or the preface.
enum class Picked { kNeedMore, kPrefixed, kHttp2, kHttp1 };
template <class Prefixed>
Picked pick_route(const char* data, size_t n, const std::vector<Prefixed>& prefixed, size_t* which) {
  bool need_more = false;
  for (size_t i = 0; i < prefixed.size(); ++i) {
    const std::string& magic = prefixed[i].magic;
    size_t m = std::min(n, magic.size());
    if (std::string_view(data, m) != std::string_view(magic).substr(0, m)) continue;
    if (m == magic.size()) {
      *which = i;
      return Picked::kPrefixed;
    }
    need_more = true;
  }
  Sniffed s = sniff(data, n);
  if (need_more || s == Sniffed::kNeedMore) return Picked::kNeedMore;
  return s == Sniffed::kHttp2 ? Picked::kHttp2 : Picked::kHttp1;
}

}  // namespace etcdq::net
