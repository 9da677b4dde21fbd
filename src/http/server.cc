#include "http/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/metrics.h"
#include "http/connections.h"
#include "http/gateway.h"
#include "http/health.h"

namespace etcdq::http {
namespace {

// cpp-httplib's accept loop hands each accepted socket to a task queue;
// this one runs the task at once, on the accept thread: the task only
// passes the socket to Connections (Listener::process_and_close_socket).
class InlineTaskQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// One request already in memory (Connections waited for all of it) as a
// cpp-httplib Stream: reads come from `in`, writes go to `out`; nothing
// here touches the network.
class MemoryStream final : public httplib::Stream {
 public:
  MemoryStream(int fd, const std::string& in, std::string* out) : fd_(fd), in_(in), out_(out) {}

  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    size_t n = std::min(size, in_.size() - pos_);  // 0: the end of what was sent
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_->append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  socket_t socket() const override { return fd_; }

  size_t consumed() const { return pos_; }

 private:
  void address(bool remote, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    int rc = remote ? getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len)
                    : getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    if (rc != 0) return;
    char buf[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&a);
      inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
      port = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
      port = ntohs(in6->sin6_port);
    }
    ip = buf;
  }

  int fd_;
  const std::string& in_;
  std::string* out_;
  size_t pos_ = 0;
};

}  // namespace

// cpp-httplib's server with its connections handed to Connections: it
// accepts, parses, routes and writes responses; Connections does the
// waiting. process_and_close_socket is cpp-httplib's per-connection hook
// (its SSLServer overrides it the same way).
class HttpServer::Listener final : public httplib::Server {
 public:
  Listener(Connections* conns, Gateway* gateway) : conns_(conns) {
    new_task_queue = [] { return new InlineTaskQueue; };
    // Only for the Keep-Alive header cpp-httplib writes: say what
    // Connections does.
    set_keep_alive_timeout(std::chrono::seconds(Connections::kIdleTimeout).count());
    set_keep_alive_max_count(Connections::kMaxRequestsPerConnection);
    serve_ = [this, gateway](int fd, const std::string& in, bool last, std::string* out, bool* keep_open,
                             std::shared_ptr<Reply>* later) {
      if (gateway != nullptr && Gateway::wants(in)) return gateway->serve(in, last, out, keep_open, later);
      MemoryStream s(fd, in, out);
      bool closed = false;
      bool ok = process_request(s, last, closed, nullptr);
      *keep_open = ok && !closed;
      return s.consumed();
    };
  }

  // cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG,
  // fixed when Debian built it): a burst of connections then has its SYNs
  // dropped and a health check behind them waits for a retransmission
  // (1 s, then 3 s...). Linux takes a second listen() as a new backlog.
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }

  // A connection accepted elsewhere (the client port's mux).
  void adopt(int fd) { conns_->adopt(fd, &serve_); }

 private:
  bool process_and_close_socket(socket_t sock) override {
    conns_->adopt(sock, &serve_);
    return true;
  }

  Connections* conns_;
  Connections::Handler serve_;
};

HttpServer::HttpServer(HttpOptions opts) : opts_(std::move(opts)) {
  if (opts_.gateway_channel) gateway_ = std::make_unique<Gateway>(opts_.gateway_channel);
}

HttpServer::~HttpServer() { stop(); }

size_t HttpServer::body_limit() const {
  return gateway_ ? Gateway::max_body_bytes(opts_.max_request_bytes) : Connections::kMaxBodyBytes;
}

void HttpServer::route(Listener* s) {
  s->Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics::scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // etcd counts its /health answers (etcdhttp's health handler).
  static prometheus::Counter& health_ok =
      metrics::counter("etcd_server_health_success", "The total number of successful health checks");
  static prometheus::Counter& health_failed =
      metrics::counter("etcd_server_health_failures", "The total number of failed health checks");
  auto health = [this](const httplib::Request& req, httplib::Response& res) {
    std::multimap<std::string, std::string> query(req.params.begin(), req.params.end());
    HealthAnswer a;
    if (!answer_health(opts_.health, req.method, req.path, query, &a)) {
      res.status = 404;
      res.set_content("404 page not found\n", "text/plain; charset=utf-8");
      return;
    }
    res.status = a.status;
    if (req.path == "/health" && a.status != 405) (a.status == 200 ? health_ok : health_failed).Increment();
    if (a.allow_get_header) res.set_header("Allow", "GET");
    if (a.status != 200 || req.path != "/health") res.set_header("X-Content-Type-Options", "nosniff");  // as etcd
    res.set_content(a.body, a.content_type);
  };
  for (const char* path : {"/health", "/livez", "/readyz", R"(/livez/[a-z_]+)", R"(/readyz/[a-z_]+)"}) {
    s->Get(path, health);
    s->Post(path, health);
    s->Put(path, health);
    s->Delete(path, health);
  }
  s->Get("/version", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"etcdserver\":\"" + opts_.server_version + "\",\"etcdcluster\":\"" + opts_.cluster_version +
                        "\"}",
                    "application/json");
  });
  s->set_payload_max_length(body_limit());
  // Go's ServeMux answer for a path nothing serves.
  s->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) res.set_content("404 page not found\n", "text/plain; charset=utf-8");
  });
}

Error HttpServer::start(const std::vector<std::pair<std::string, int>>& listen) {
  if (!conns_) conns_ = std::make_unique<Connections>(health_may_wait, body_limit());
  for (const auto& [host, port] : listen) {
    auto s = std::make_unique<Listener>(conns_.get(), gateway_.get());
    route(s.get());
    if (!s->bind_to_port(host, port)) {
      stop();
      return {Code::kUnavailable, "cannot listen for HTTP on " + host + ":" + std::to_string(port)};
    }
    s->widen_backlog();
    auto* raw = s.get();
    servers_.push_back(std::move(s));
    threads_.emplace_back([raw] { raw->listen_after_bind(); });
  }
  return {};
}

void HttpServer::adopt(int fd) {
  std::call_once(adopted_once_, [this] {
    if (!conns_) conns_ = std::make_unique<Connections>(health_may_wait, body_limit());
    adopted_ = std::make_unique<Listener>(conns_.get(), gateway_.get());
    route(adopted_.get());
  });
  adopted_->adopt(fd);
}

void HttpServer::stop() {
  for (auto& s : servers_) s->stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  if (conns_) conns_->stop();  // before the listeners its connections' handlers belong to
  servers_.clear();
  adopted_.reset();
  conns_.reset();
}

}  // namespace etcdq::http
