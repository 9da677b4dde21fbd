#include "http/server.h"

#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <atomic>

#include "common/error.h"
#include "common/metrics.h"
#include "common/socket_address.h"
#include "http/connections.h"
#include "http/gateway.h"
#include "http/health.h"
#include "http/reply.h"
#include "http/timer.h"

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
    common::socket_address(fd_, remote, &ip, &port);
  }

  int fd_;
  const std::string& in_;
  std::string* out_;
  size_t pos_ = 0;
};

// etcd counts its /health answers (etcdhttp's health handler).
prometheus::Counter& health_counter(bool ok) {
  static prometheus::Counter& success =
      metrics::counter("etcd_server_health_success", "The total number of successful health checks");
  static prometheus::Counter& failed =
      metrics::counter("etcd_server_health_failures", "The total number of failed health checks");
  return ok ? success : failed;
}

// etcd serves /metrics through client_golang's promhttp.Handler, which
// counts its scrapes by status code (200, 500 and 503 shown from the start)
// and shows the ones being served, this one included.
struct ScrapeCounters {
  prometheus::Gauge& in_flight = metrics::gauge("promhttp_metric_handler_requests_in_flight",
                                                "Current number of scrapes being served.");
  prometheus::Family<prometheus::Counter>& total = prometheus::BuildCounter()
                                                       .Name("promhttp_metric_handler_requests_total")
                                                       .Help("Total number of scrapes by HTTP status code.")
                                                       .Register(metrics::registry());
  prometheus::Counter& ok = total.Add({{"code", "200"}});
  ScrapeCounters() {
    total.Add({{"code", "500"}});
    total.Add({{"code", "503"}});
  }
};

ScrapeCounters& scrape_counters() {
  static auto* c = new ScrapeCounters;  // never destroyed, as the registry
  return *c;
}

// /health, /livez and /readyz, outside cpp-httplib: their answer may come
// later (a linearizable read), through a Reply, so that no worker waits on
// the cluster (health.h). Returns 0 when `in` is not a health request (or
// not one this parser takes: cpp-httplib then answers it), else the bytes
// consumed.
size_t serve_health(const HealthSource& src, const std::string& in, bool last, std::string* out, bool* keep_open,
                    std::shared_ptr<Reply>* later) {
  size_t eol = in.find("\r\n");
  size_t end = in.find("\r\n\r\n");
  if (eol == std::string::npos || end == std::string::npos) return 0;
  std::string line = in.substr(0, eol);
  size_t sp1 = line.find(' ');
  size_t sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) return 0;
  std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string version = line.substr(sp2 + 1);
  size_t q = target.find('?');
  std::string path = target.substr(0, q);
  if (!is_health_path(path)) return 0;
  httplib::Params query;
  if (q != std::string::npos) httplib::detail::parse_query_text(target.substr(q + 1), query);
  // Connections framed the request by Content-Length (chunks decoded).
  size_t length = 0;
  bool keep = version != "HTTP/1.0";
  for (size_t pos = eol + 2; pos < end;) {
    size_t next = in.find("\r\n", pos);
    std::string h = in.substr(pos, next - pos);
    pos = next + 2;
    size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    std::string name = h.substr(0, colon);
    std::string value = h.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(0, 1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
    if (strcasecmp(name.c_str(), "content-length") == 0) {
      length = std::strtoull(value.c_str(), nullptr, 10);
    } else if (strcasecmp(name.c_str(), "connection") == 0) {
      if (strcasecmp(value.c_str(), "close") == 0) keep = false;
      if (strcasecmp(value.c_str(), "keep-alive") == 0) keep = true;
    }
  }
  if (in.size() - (end + 4) < length) return 0;
  *keep_open = keep && !last;
  bool head = method == "HEAD";
  bool is_health = path == "/health";
  bool keep_after = *keep_open;
  auto render = [head, is_health, keep_after](const HealthAnswer& a) {
    if (is_health && a.status != 405) health_counter(a.status == 200).Increment();
    std::string r = "HTTP/1.1 " + std::to_string(a.status) + " " + reason_phrase(a.status) + "\r\n";
    r += "Content-Type: " + a.content_type + "\r\n";
    r += "Content-Length: " + std::to_string(a.body.size()) + "\r\n";
    if (a.allow_get_header) r += "Allow: GET\r\n";
    if (a.status != 200 || !is_health) r += "X-Content-Type-Options: nosniff\r\n";  // as etcd
    if (!keep_after) r += "Connection: close\r\n";
    r += "\r\n";
    if (!head) r += a.body;
    return r;
  };
  // Answered at once (the usual case) in *out; else later, through a reply.
  struct Pending {
    std::mutex mu;
    bool returned = false;
    bool answered = false;
    std::string bytes;
    std::shared_ptr<Reply> reply;
  };
  auto p = std::make_shared<Pending>();
  answer_health(src, method, path, query, [p, render, keep_after](HealthAnswer a) {
    std::string bytes = render(a);
    std::shared_ptr<Reply> reply;
    {
      std::lock_guard<std::mutex> lock(p->mu);
      if (!p->returned) {
        p->bytes = std::move(bytes);
        p->answered = true;
        return;
      }
      reply = p->reply;
    }
    reply->write(bytes);
    reply->finish(keep_after);
  });
  std::lock_guard<std::mutex> lock(p->mu);
  p->returned = true;
  if (p->answered) {
    *out = std::move(p->bytes);
  } else {
    p->reply = std::make_shared<Reply>();
    *later = p->reply;
  }
  return end + 4 + length;
}

// The bulk lane's requests (connections.h): the JSON gateway's.
bool is_bulk(const std::string& request) { return Gateway::wants(request); }

}  // namespace

// cpp-httplib's server with its connections handed to Connections: it
// accepts, parses, routes and writes responses; Connections does the
// waiting. process_and_close_socket is cpp-httplib's per-connection hook
// (its SSLServer overrides it the same way).
class HttpServer::Listener final : public httplib::Server {
 public:
  Listener(Connections* conns, Gateway* gateway, const HealthSource* health) : conns_(conns) {
    new_task_queue = [] { return new InlineTaskQueue; };
    // Only for the Keep-Alive header cpp-httplib writes: say what
    // Connections does.
    set_keep_alive_timeout(std::chrono::seconds(Connections::kIdleTimeout).count());
    set_keep_alive_max_count(Connections::kMaxRequestsPerConnection);
    serve_ = [this, gateway, health](int fd, const std::string& in, bool last, std::string* out, bool* keep_open,
                                     std::shared_ptr<Reply>* later) {
      if (gateway != nullptr && Gateway::wants(in)) return gateway->serve(in, last, out, keep_open, later);
      if (size_t n = serve_health(*health, in, last, out, keep_open, later)) return n;
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

HttpServer::HttpServer(HttpOptions opts) : opts_(std::move(opts)), timer_(std::make_shared<Timer>()) {
  // Shown at 0 from the first scrape, as etcd registers them at its start.
  health_counter(true);
  health_counter(false);
  scrape_counters();
  if (opts_.gateway_channel) gateway_ = std::make_unique<Gateway>(opts_.gateway_channel, opts_.grpc_unary_started);
  health_ = opts_.health;
  if (opts_.health.read && opts_.health_read_timeout.count() > 0) {
    // Whichever comes first, the read's answer or the timeout, answers.
    std::weak_ptr<Timer> timer = timer_;
    health_.read = [read = opts_.health.read, timer, timeout = opts_.health_read_timeout](
                       bool serializable, std::function<void(std::string)> done) {
      if (serializable) return read(true, std::move(done));
      auto once = std::make_shared<std::atomic<bool>>(false);
      auto answer = [once, done = std::move(done)](std::string err) {
        if (!once->exchange(true)) done(std::move(err));
      };
      auto t = timer.lock();
      if (!t) return read(false, answer);
      Timer::Id id = t->after(timeout, [answer] { answer(errors::timeout().message()); });
      read(false, [answer, timer, id](std::string err) {
        answer(std::move(err));
        if (auto t = timer.lock()) t->cancel(id);  // its entry goes now, not at the timeout
      });
    };
  }
}

HttpServer::~HttpServer() { stop(); }

size_t HttpServer::body_limit() const {
  return gateway_ ? Gateway::max_body_bytes(opts_.max_request_bytes) : Connections::kMaxBodyBytes;
}

void HttpServer::route(Listener* s) {
  s->Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    ScrapeCounters& c = scrape_counters();
    c.in_flight.Increment();
    res.set_content(metrics::scrape(), "text/plain; version=0.0.4; charset=utf-8");
    c.in_flight.Decrement();
    c.ok.Increment();  // after the scrape, as promhttp counts it
  });
  s->Get("/version", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"etcdserver\":\"" + opts_.server_version + "\",\"etcdcluster\":\"" + opts_.cluster_version +
                        "\",\"storage\":\"" + opts_.storage_version + "\"}",
                    "application/json");
  });
  if (opts_.page) {
    // Last: the paths above win. A page answers for its requester's token
    // (member::Member::page checks it), so it is never cached.
    s->Get("/.*", [this](const httplib::Request& req, httplib::Response& res) {
      int status = 200;
      std::string type, body;
      if (!opts_.page(req.path, req.get_header_value("Authorization"), &status, &type, &body)) {
        res.status = 404;
        return;
      }
      res.status = status;
      res.set_header("Cache-Control", "no-store");
      res.set_content(body, type);
    });
  }
  s->set_payload_max_length(body_limit());
  // Go's ServeMux answer for a path nothing serves.
  s->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) res.set_content("404 page not found\n", "text/plain; charset=utf-8");
  });
}

Error HttpServer::start(const std::vector<std::pair<std::string, int>>& listen) {
  if (!conns_) conns_ = std::make_unique<Connections>(is_bulk, body_limit());
  for (const auto& [host, port] : listen) {
    auto s = std::make_unique<Listener>(conns_.get(), gateway_.get(), &health_);
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

Error HttpServer::probe(const std::string& host, int port, const std::string& role) {
  const std::string name = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int rc = getaddrinfo(h.empty() ? nullptr : h.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return {Code::kInvalidArgument, "cannot listen for " + role + "s on " + name + ": " + gai_strerror(rc)};
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int err = 0;
  if (fd < 0) {
    err = errno;
  } else {
    httplib::default_socket_options(fd);
    if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 1) != 0) err = errno;
    ::close(fd);
  }
  freeaddrinfo(res);
  if (err != 0) return {Code::kUnavailable, "cannot listen for " + role + "s on " + name + ": " + std::strerror(err)};
  return {};
}

void HttpServer::adopt(int fd) {
  std::call_once(adopted_once_, [this] {
    if (!conns_) conns_ = std::make_unique<Connections>(is_bulk, body_limit());
    adopted_ = std::make_unique<Listener>(conns_.get(), gateway_.get(), &health_);
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
  if (timer_) timer_->stop();
  servers_.clear();
  adopted_.reset();
  conns_.reset();
}

}  // namespace etcdq::http
