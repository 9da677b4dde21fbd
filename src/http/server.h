// The HTTP/1.1 side of a member (DESIGN.md, http/), on
// --listen-client-http-urls and --listen-metrics-urls:
//   GET /metrics   Prometheus text: server and per-queue metrics
//   GET /health    {"health":"true"} while a leader is known, else 503
//                  with "false" (etcd's /health)
//   GET /version   {"etcdserver":..., "etcdcluster":...}
// The JSON gateway (/v3/...) is not served yet.
//
// Thread-safety: start/stop from one thread; handlers run on cpp-httplib's
// threads and only call the given functions.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

namespace httplib {
class Server;
}

namespace etcdq::http {

struct HttpOptions {
  std::function<std::string()> metrics;  // the /metrics body
  std::function<bool()> has_leader;
  std::string server_version;
  std::string cluster_version;
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions opts);
  ~HttpServer();  // stop()

  // Listens on each (host, port). Errors name the address.
  Error start(const std::vector<std::pair<std::string, int>>& listen);
  void stop();

 private:
  HttpOptions opts_;
  std::vector<std::unique_ptr<httplib::Server>> servers_;
  std::vector<std::thread> threads_;
};

}  // namespace etcdq::http
