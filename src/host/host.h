// One etcdq member and everything that reaches it, as etcd's embed.Etcd
// (embed/etcd.go StartEtcd, Close): a Host owns the member (member/member.h),
// every listener, the TLS contexts, and every server on them — the client
// gRPC server (server/server.h), the HTTP servers (http/server.h: client
// HTTP and metrics URLs), the peer gRPC server (server/peer_server.h) and
// the peer URL's listener that also carries libraft's connections. main
// (cli/main.cc) is flags → Config (host/config.h) → Host::start → a stop
// signal → Host::stop.
//
// start() brings the member up in this order (each step's failure stops
// what the earlier ones started, and is returned):
//   1. tls        client and peer TLS contexts, every file read (host/tls.h),
//                 and the dialer libraft's outgoing peer connections use;
//      checks     etcd's bootstrap checks (host/bootstrap_check.h) and the
//                 JWT keys (auth/jwt_tokens.h), refused before anything opens;
//      bind       every listen URL bound (not yet accepting), before the
//                 data dir exists: a start that fails for a port leaves no
//                 data dir, so the next start's flags count (etcd binds its
//                 listeners before it creates the data dir too);
//   2. member     Member::open: data dir, identity, state database, consensus;
//   3. check      --experimental-initial-corrupt-check, on a data dir that
//                 held a member before (etcd skips a new one), before any
//                 peer or client is served, as etcd (embed/etcd.go);
//   4. peers      the peer gRPC server, then the peer URLs' listener (one
//                 port: HTTP/2 to the Peer service, libraft's raw
//                 connections to consensus; https:// behind TLS): a cluster
//                 elects its leader through it;
//   4b. health    the client URLs' listeners and the metrics server start:
//                 /health, /readyz, /livez and /metrics answer (503 "RAFT
//                 NO LEADER" while there is none); gRPC connections are
//                 held until step 6;
//   5. join       Member::join: a leader, the log held at start applied, this
//                 member's attributes published;
//   6. clients    the client gRPC server (it takes the held connections),
//                 the HTTP server with the JSON gateway (HTTP/1.1 goes to it
//                 from now on; gRPC and HTTP/1.1 share the client URLs'
//                 ports, net/mux.h), --listen-client-http-urls' http:// ones.
// Steps 4 and 4b start the listeners bound in step 1 (connections wait in
// the backlog until then); routes reach their server through the Host,
// which makes each server before its listener starts. The http:// URLs of
// --listen-client-http-urls and --listen-metrics-urls are served by
// cpp-httplib, which binds in step 6: step 1 only tries their addresses.
//
// stop(): no new client connections, the HTTP servers stop, the member
// stops (in-flight proposals finish and are answered, new ones get "server
// stopped"), then the peer listener (libraft talked to the others until
// then), the client gRPC server (every watch stream ends with Unavailable,
// clients resume from their last revision), the TLS pumps, the member's
// parts, and last the peer dialer (after libraft closed its connections).
//
// Thread-safety: start() and stop() from one thread (main's).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "host/config.h"

namespace etcdq::http {
class HttpServer;
class Timer;
struct HttpOptions;
}
namespace etcdq::member {
class Member;
}
namespace etcdq::net {
class Mux;
class TlsContext;
class TlsListener;
class TlsPump;
}  // namespace etcdq::net
namespace etcdq::server {
class ClientServer;
class PeerServer;
}  // namespace etcdq::server

namespace etcdq::host {

class Host {
 public:
  // Errors: a TLS file, the data dir, the state database, the Raft log, the
  // initial corruption check ("discovery failed: ..."), or a listen URL
  // that cannot be bound (the message names it). *stopped: a stop was
  // requested (member::Options::stop_requested) before the member served
  // (not an error; *out is then empty).
  static Error start(Config cfg, std::unique_ptr<Host>* out, bool* stopped);
  ~Host();  // stop()
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  // Idempotent.
  void stop();

 private:
  explicit Host(Config cfg);
  Error open_tls();
  Error check_bootstrap();
  Error bind_listeners();
  Error bind_peers();
  Error open_member(bool* stopped);
  Error check_initial_corruption();
  Error serve_peers();
  Error serve_health_early();
  Error serve_clients();
  http::HttpOptions health_options();
  // The client URLs' gRPC connections: to the client server once it
  // serves, held until then (at most kMaxHeldGrpcConnections; more are
  // closed). Mux thread.
  void route_grpc(int fd);
  // The client URLs' HTTP/1.1 (and --listen-client-http-urls' https://):
  // to http1_route_. Mux and TLS pump threads.
  void route_http1(int fd);
  static constexpr size_t kMaxHeldGrpcConnections = 1024;

  Config cfg_;
  bool member_initialized_ = false;  // etcd's memberInitialized: the data dir held a member
  std::shared_ptr<net::TlsContext> client_tls_;
  std::shared_ptr<net::TlsContext> peer_tls_;
  std::unique_ptr<net::TlsPump> peer_dialer_;  // libraft's outgoing TLS
  std::unique_ptr<member::Member> member_;
  std::unique_ptr<server::PeerServer> peer_server_;
  std::unique_ptr<net::Mux> peer_mux_;                  // http:// peer URLs
  std::unique_ptr<net::TlsListener> peer_tls_listener_;  // https:// peer URLs
  std::unique_ptr<server::ClientServer> client_server_;
  std::unique_ptr<http::HttpServer> http_server_;     // client URLs' HTTP, or --listen-client-http-urls
  std::unique_ptr<http::HttpServer> metrics_server_;  // --listen-metrics-urls
  std::unique_ptr<net::Mux> client_mux_;              // http:// client URLs
  std::unique_ptr<net::Mux> client_http_mux_;         // http:// --listen-client-http-urls (HTTP/1.1 only)
  std::vector<std::unique_ptr<net::TlsListener>> tls_listeners_;  // https:// client, HTTP, metrics URLs
  // Health and metrics on the client URLs while the member waits for a
  // leader (serve_health_early); keeps the connections it took until stop().
  std::unique_ptr<http::HttpServer> early_http_;
  std::unique_ptr<http::Timer> health_timer_;  // health reads' watch for a lost leader
  std::atomic<http::HttpServer*> http1_route_{nullptr};  // where client HTTP/1.1 (either kind of URL) goes now
  std::mutex held_mu_;              // guards the two below
  bool grpc_ready_ = false;         // client_server_ takes connections
  std::vector<int> held_grpc_;      // gRPC connections made before that
  bool stopped_ = false;
};

}  // namespace etcdq::host
