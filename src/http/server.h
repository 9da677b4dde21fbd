// The HTTP/1.1 side of a member (DESIGN.md, http/), on the client URLs
// (next to gRPC, as etcd: net/mux.h routes each connection), and on
// --listen-client-http-urls and --listen-metrics-urls:
//   GET /metrics   Prometheus text: common/metrics.h's scrape() (every layer's series)
//   GET /health, /livez, /readyz   etcd's health checks (health.h; one
//                  waiting for a linearizable read answers later, costing
//                  no worker, and gives up at health_read_timeout)
//   GET /version   {"etcdserver":..., "etcdcluster":..., "storage":...}
//   GET other      a page of the member's plug-ins (HttpOptions::page)
//   POST /v3/...   the JSON gateway (gateway.h), when given a channel
//                  (its calls answer later, costing no worker: reply.h)
//
// Idle and slow connections cost no thread: connections.h waits for every
// request and writes every response on one epoll thread; cpp-httplib parses
// and routes each complete request on a small worker pool, in two lanes: the
// gateway's at low priority, the rest at normal priority (connections.h).
// A /health check answers at once however many idle or slowloris
// connections are open (test_http_starvation.py) and under a gateway flood
// (test_http_gateway_flood.py), and connections, threads and memory are
// bounded (connections.h).
//
// Thread-safety: start/stop from one thread; handlers run on the worker
// threads and only call the given functions.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "http/health.h"

namespace grpc {
class Channel;
}

namespace httplib {
class Server;
}

namespace etcdq::http {

class Connections;
class Gateway;
class Timer;

struct HttpOptions {
  HealthSource health;                   // /health, /livez, /readyz (health.h)
  // A linearizable health read not done by then answers etcd's "request
  // timed out" (etcd's request timeout); 0: the source's own bound.
  std::chrono::milliseconds health_read_timeout{0};
  std::string server_version;
  std::string cluster_version;
  std::string storage_version;  // etcd 3.6's "storage" field
  // The JSON gateway's way to this member's own gRPC server; none: no
  // gateway (/v3/... then answers 404 like any unknown path).
  std::shared_ptr<grpc::Channel> gateway_channel;
  // The unary calls that gRPC server started so far (gateway.h: the
  // gateway yields to gRPC clients); none: it never yields.
  std::function<uint64_t()> grpc_unary_started;
  size_t max_request_bytes = 1536 * 1024;  // --max-request-bytes (the gateway's body bound)
  // Other GET pages (the key-space plug-ins', e.g. /queues): answers
  // `path` for the request's Authorization header (an etcd token, as the
  // gateway takes it; "" when absent): true with the status (200, or 401
  // with an error text), Content-Type and body when something serves it;
  // false: 404. None: every other path is 404.
  std::function<bool(const std::string& path, const std::string& authorization, int* status,
                     std::string* content_type, std::string* body)>
      page;
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions opts);
  ~HttpServer();  // stop()

  // Listens on each (host, port). Errors name the address.
  Error start(const std::vector<std::pair<std::string, int>>& listen);
  // Whether start() could bind (host, port) now, without serving it: a
  // socket with cpp-httplib's own options (SO_REUSEPORT, not SO_REUSEADDR:
  // a probe with other options than the server's later bind is refused by
  // the previous process's connections in TIME_WAIT after a restart) is
  // bound, listened on and closed. Errors: Unavailable "cannot listen for
  // <role>s on host:port: <errno text>", as net/mux.h words them. Any thread.
  static Error probe(const std::string& host, int port, const std::string& role);
  // Serves a connection accepted elsewhere (the client port, net/mux.h),
  // taking ownership of `fd`; any thread, until stop().
  void adopt(int fd);
  void stop();

 private:
  class Listener;
  void route(Listener* s);  // the endpoints above
  size_t body_limit() const;  // the largest request body taken

  HttpOptions opts_;
  std::shared_ptr<Timer> timer_;  // health reads' timeouts; shared with the reads still out
  HealthSource health_;           // opts_.health, its linearizable reads timed out
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<Connections> conns_;
  std::vector<std::unique_ptr<Listener>> servers_;
  std::vector<std::thread> threads_;
  std::once_flag adopted_once_;
  std::unique_ptr<Listener> adopted_;  // routes adopted connections; never listens
};

}  // namespace etcdq::http
