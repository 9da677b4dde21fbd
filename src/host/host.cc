#include "host/host.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>

#include "host/bootstrap_check.h"
#include "host/tls.h"
#include "http/server.h"
#include "http/timer.h"
#include "member/member.h"
#include "net/grpc_fd_guard.h"
#include "net/h2_guard.h"
#include "net/mux.h"
#include "net/tls_context.h"
#include "net/tls_listener.h"
#include "net/tls_pump.h"
#include "consensus/forwarder.h"
#include "consensus/transport.h"
#include "server/downgrade.h"
#include "server/grpc_metrics.h"
#include "server/maintenance_service.h"
#include "server/peer_server.h"
#include "server/server.h"

namespace etcdq::host {
namespace {

// (host, port) of the URLs with the given scheme.
std::vector<std::pair<std::string, int>> addresses(const std::vector<Url>& urls, const std::string& scheme) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& u : urls) {
    if (u.scheme == scheme) out.emplace_back(u.host, u.port);
  }
  return out;
}

// The client gRPC server's grace for in-flight calls at stop.
constexpr int kClientGraceMs = 1000;
// How often a waiting linearizable health read looks for a lost leader.
constexpr auto kHealthLeaderPoll = std::chrono::milliseconds(50);
// The longest a linearizable health check waits for its read (issue #36:
// /health and /readyz answer within a second on a member whose peers just
// went down). A member learns it has lost its leader only an election
// timeout after the last message (1-2 s with etcd's defaults: libraft
// randomizes it between one and two), and a read started before that
// waits for a leader that will not answer; past this it answers 503 with
// etcd's reason for a read that did not complete ("etcdserver: request
// timed out", which etcd gives after its 7 s request timeout), or "no
// leader" once the member knows. A healthy member's read takes
// milliseconds (one heartbeat round), so this is not reached under load
// that a member serves.
constexpr auto kHealthAnswerBudget = std::chrono::milliseconds(800);

}  // namespace

Host::Host(Config cfg) : cfg_(std::move(cfg)) {}

Host::~Host() { stop(); }

Error Host::start(Config cfg, std::unique_ptr<Host>* out, bool* stopped) {
  *stopped = false;
  std::unique_ptr<Host> h(new Host(std::move(cfg)));
  // etcd's memberInitialized: a data dir that held a member before (read
  // before anything below creates it).
  h->member_initialized_ = std::filesystem::exists(std::filesystem::path(h->cfg_.member.data_dir) / "member");
  if (Error e = h->open_tls()) return e;
  if (Error e = h->check_bootstrap()) return e;
  // Before the data dir exists: a start that cannot have its ports leaves
  // the disk as it found it, so the next start's flags take effect.
  if (Error e = h->bind_listeners()) return e;
  if (Error e = h->open_member(stopped); e || *stopped) return e;
  if (Error e = h->check_initial_corruption()) return e;
  if (Error e = h->serve_peers()) return e;
  if (Error e = h->serve_health_early()) return e;
  if (!h->member_->join()) {
    if (h->member_->removed_at_start()) {
      return Error(Code::kFailedPrecondition, "the member has been permanently removed from the cluster");
    }
    *stopped = true;
    return {};
  }
  if (Error e = h->serve_clients()) return e;
  *out = std::move(h);
  return {};
}

Error Host::open_tls() {
  if (cfg_.client_tls_wanted()) {
    if (Error e = open_client_tls(cfg_, &client_tls_)) return e;
  }
  // libraft's outgoing connections run TLS in peer_dialer_; the Peer
  // service's calls use gRPC's TLS credentials.
  if (cfg_.peer_tls_wanted()) {
    if (Error e = open_peer_tls(cfg_, &peer_tls_)) return e;
    consensus::Forwarder::set_peer_credentials(peer_channel_credentials(peer_tls_->options()));
    peer_dialer_ = std::make_unique<net::TlsPump>(peer_tls_, net::TlsPump::Routes{}, "peer");
    if (Error e = peer_dialer_->start()) return e;
  }
  return {};
}

// etcd's bootstrap checks and token provider, before anything is opened.
Error Host::check_bootstrap() {
  const Config& c = cfg_;
  if (Error e = check_advertise_matches_cluster(c.member.name, c.initial_cluster, c.initial_advertise_peer_urls,
                                                !member_initialized_)) {
    return e;
  }
  if (c.jwt) {
    std::unique_ptr<auth::JwtTokens> jwt;
    if (Error e = auth::JwtTokens::create(*c.jwt, &jwt)) return e;
    cfg_.member.jwt = std::move(jwt);
  }
  return {};
}

Error Host::open_member(bool* stopped) {
  member::Options mo = cfg_.member;
  mo.initial_cluster.clear();
  for (const auto& entry : cfg_.initial_cluster) {
    const std::string& name = entry.first;  // (clang 14 cannot capture a structured binding)
    const Url& url = entry.second;
    auto it = std::find_if(mo.initial_cluster.begin(), mo.initial_cluster.end(),
                           [&name](const member::InitialMember& m) { return m.name == name; });
    if (it == mo.initial_cluster.end()) {
      mo.initial_cluster.push_back({name, {}, url.host_port()});
      it = std::prev(mo.initial_cluster.end());
    }
    it->peer_urls.push_back(url.text);
  }
  // etcd reads the members from a data dir that holds one and ignores
  // --initial-cluster then (etcdserver bootstrapWithWAL): a member restarted
  // with a list that does not name it (the list it was added with, or the
  // first members') starts, with --initial-advertise-peer-urls as its own.
  const std::string& self = cfg_.member.name;
  if (member_initialized_ && !cfg_.initial_advertise_peer_urls.empty() &&
      std::none_of(mo.initial_cluster.begin(), mo.initial_cluster.end(),
                   [&self](const member::InitialMember& m) { return m.name == self; })) {
    member::InitialMember m{self, {}, cfg_.initial_advertise_peer_urls.front().host_port()};
    for (const auto& u : cfg_.initial_advertise_peer_urls) m.peer_urls.push_back(u.text);
    mo.initial_cluster.push_back(std::move(m));
    spdlog::info("--initial-cluster does not name {}; its data dir exists, so it is ignored (as etcd does) and "
                 "--initial-advertise-peer-urls give this member's peer URLs",
                 self);
  }
  if (peer_dialer_) {
    mo.peer_tls_dial = [d = peer_dialer_.get()](int tcp, int plain, const std::string& host) {
      d->dial(tcp, plain, host);
    };
  }
  if (Error e = member::Member::open(std::move(mo), &member_, stopped)) return e;
  return {};
}

Error Host::check_initial_corruption() {
  // A new member has nothing to compare.
  if (!cfg_.initial_corrupt_check || !member_initialized_) return {};
  if (Error e = member_->initial_corruption_check()) {
    spdlog::error("checkInitialHashKV failed: {}", e.message());
    return Error(e.code(), "discovery failed: " + e.message());
  }
  return {};
}

// Every listen URL is bound here, before the member opens, as etcd binds
// them before it creates the data dir (embed/etcd.go StartEtcd:
// configurePeerListeners, configureClientListeners). The listeners accept
// nothing until serve_peers() / serve_clients() start them (connections
// wait in the backlog); their routes reach the servers through the Host,
// which makes them by then. The HTTP servers of --listen-client-http-urls
// and --listen-metrics-urls (http:// ones) bind when they start: their
// addresses are tried here (bound and closed at once), so that a taken
// port is found before the data dir is made.
// One cap on the streams of a connection: the peer server advertises it,
// the guard enforces it on client and peer URLs alike (server/server.h).
static_assert(net::H2Guard::kMaxConcurrentStreams == static_cast<size_t>(server::kMaxConcurrentStreams));

Error Host::bind_listeners() {
  if (Error e = bind_peers()) return e;
  net::Mux::Routes routes;
  routes.http2 = [this](int fd) { route_grpc(fd); };
  if (cfg_.listen_client_http_urls.empty()) routes.http1 = [this](int fd) { route_http1(fd); };
  net::TlsPump::Routes tls_routes{routes.http2, routes.http1, {}};
  // HTTP/2 passes net/h2_guard.h: TLS in its pump, plaintext inside gRPC's
  // reads (net/grpc_fd_guard.h).
  routes.http2 = net::guarded_route(routes.http2, "client");
  client_mux_ = std::make_unique<net::Mux>(std::move(routes));
  if (Error e = client_mux_->listen(addresses(cfg_.listen_client_urls, "http"))) return e;
  // https:// URLs: TLS ends in net/tls_pump.h, the plaintext goes where a
  // plain URL's would (each kind gets a TlsListener of its own).
  auto bind_tls = [this](const std::vector<Url>& urls, net::TlsPump::Routes r, const char* role) -> Error {
    auto tls = addresses(urls, "https");
    if (tls.empty()) return {};
    auto l = std::make_unique<net::TlsListener>(client_tls_, std::move(r), role);
    Error e = l->listen(tls);
    tls_listeners_.push_back(std::move(l));
    return e;
  };
  if (Error e = bind_tls(cfg_.listen_client_urls, std::move(tls_routes), "client")) return e;
  // (HTTP routes through http1_route_: the health-only server until the
  // member serves, then the one with the JSON gateway.)
  if (Error e = bind_tls(cfg_.listen_client_http_urls, {nullptr, [this](int fd) { route_http1(fd); }, {}},
                         "client HTTP")) {
    return e;
  }
  if (Error e = bind_tls(cfg_.listen_metrics_urls, {nullptr, [this](int fd) { metrics_server_->adopt(fd); }, {}},
                         "metrics")) {
    return e;
  }
  // http:// URLs of --listen-client-http-urls: HTTP/1.1 only (an HTTP/2
  // connection is closed, as gRPC is not served there), routed as the
  // client URLs' HTTP is, so they answer health from serve_health_early()
  // on, before a leader, and the gateway once the member serves.
  if (auto plain = addresses(cfg_.listen_client_http_urls, "http"); !plain.empty()) {
    client_http_mux_ = std::make_unique<net::Mux>(net::Mux::Routes{nullptr, [this](int fd) { route_http1(fd); }, {}});
    if (Error e = client_http_mux_->listen(plain)) return e;
  }
  for (const auto& [host, port] : addresses(cfg_.listen_metrics_urls, "http")) {
    if (Error e = http::HttpServer::probe(host, port, "metrics client")) return e;
  }
  return {};
}

// Member-only traffic on the peer URL only, one listener (net/mux.h):
// HTTP/2 to the Peer service, libraft's raw connections (they open with
// consensus/transport.h's magic) to consensus.
Error Host::bind_peers() {
  net::Mux::Routes routes;
  routes.http2 = [this](int fd) { peer_server_->adopt(fd); };
  routes.prefixed.push_back(
      {std::string(consensus::PeerTransport::kMagic), [this](int fd) { member_->adopt_raft_connection(fd); }});
  std::vector<std::pair<std::string, int>> listen;
  for (const auto& u : cfg_.listen_peer_urls) listen.emplace_back(u.host, u.port);
  // https:// peer URLs: the same routes behind TLS (net/tls_pump.h), and
  // nothing in plaintext.
  if (peer_tls_) {
    net::TlsPump::Routes tr{routes.http2, nullptr, {}};
    tr.prefixed.push_back({routes.prefixed[0].magic, routes.prefixed[0].route});
    peer_tls_listener_ = std::make_unique<net::TlsListener>(peer_tls_, std::move(tr), "peer");
    return peer_tls_listener_->listen(listen);
  }
  // Plain HTTP/2 passes the guard inside gRPC's reads (net/grpc_fd_guard.h).
  routes.http2 = net::guarded_route(routes.http2, "peer");
  peer_mux_ = std::make_unique<net::Mux>(std::move(routes), "peer");
  return peer_mux_->listen(listen);
}

void Host::route_http1(int fd) {
  if (http::HttpServer* hs = http1_route_.load()) {
    hs->adopt(fd);
  } else {
    ::close(fd);
  }
}

void Host::route_grpc(int fd) {
  std::lock_guard<std::mutex> lock(held_mu_);
  if (grpc_ready_) return client_server_->adopt(fd);
  if (held_grpc_.size() >= kMaxHeldGrpcConnections) {
    // Connections whose clients went away must not keep the slots: close
    // those first (a client that connected and left, many times, would
    // otherwise shut out every later one until a leader is known).
    auto gone = [](int held) {
      pollfd p{held, POLLRDHUP, 0};
      return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    };
    auto keep = std::stable_partition(held_grpc_.begin(), held_grpc_.end(), [&gone](int held) { return !gone(held); });
    std::for_each(keep, held_grpc_.end(), [](int held) { ::close(held); });
    held_grpc_.erase(keep, held_grpc_.end());
  }
  if (held_grpc_.size() >= kMaxHeldGrpcConnections) {
    ::close(fd);
    return;
  }
  held_grpc_.push_back(fd);
}

// What /health, /readyz, /livez and /metrics report: the member's own
// view, from open() on.
http::HttpOptions Host::health_options() {
  member::Member* m = member_.get();
  http::HttpOptions ho;
  ho.health.has_leader = [m] { return m->has_leader(); };
  ho.health.is_learner = [m] { return m->is_learner(); };
  ho.health.alarms = [m] { return m->active_alarms(); };
  if (!health_timer_) health_timer_ = std::make_unique<http::Timer>();
  http::Timer* timer = health_timer_.get();
  ho.health.read = [m, timer](bool serializable, std::function<void(std::string)> done) {
    if (serializable) {
      m->health_read(true, [done = std::move(done)](Error e) { done(e.message()); });
      return;
    }
    // A linearizable read that started while the member still had a leader
    // waits for it until the request timeout (7 s, measured, when the
    // peers were SIGKILLed): once the member knows it has none, the check
    // answers "no leader" at once, and it never waits past
    // kHealthAnswerBudget.
    struct Once {
      std::atomic<bool> answered{false};
      std::function<void(std::string)> done;
      void answer(const std::string& why) {
        if (!answered.exchange(true)) done(why);
      }
    };
    auto once = std::make_shared<Once>();
    once->done = std::move(done);
    m->health_read(false, [once](Error e) { once->answer(e.message()); });
    auto watch = std::make_shared<std::function<void()>>();
    auto give_up_at = std::chrono::steady_clock::now() + kHealthAnswerBudget;
    *watch = [m, timer, once, give_up_at, weak = std::weak_ptr<std::function<void()>>(watch)] {
      if (once->answered) return;
      if (!m->has_leader()) return once->answer(errors::no_leader().message());
      auto now = std::chrono::steady_clock::now();
      if (now >= give_up_at) return once->answer(errors::timeout().message());
      auto next = std::min<std::chrono::steady_clock::duration>(kHealthLeaderPoll, give_up_at - now);
      if (auto again = weak.lock()) timer->after(next, [again] { (*again)(); });
    };
    timer->after(kHealthLeaderPoll, [watch] { (*watch)(); });
  };
  ho.health_read_timeout = m->request_timeout();
  // The etcd version etcdq answers as, as Maintenance.Status does: clients
  // decide what to send from it (etcdq's own is `etcdq --version`).
  ho.server_version = server::kEtcdApiVersion;
  ho.cluster_version = server::kEtcdApiVersion;
  ho.storage_version = server::storage_version(server::kEtcdApiVersion);
  ho.max_request_bytes = static_cast<size_t>(cfg_.member.limits.max_request_bytes);
  // The plug-ins' pages (/queues), on every HTTP port: each shows only what
  // the requester's token may read on the client port (Member::page).
  ho.page = [m](const std::string& path, const std::string& authorization, int* status, std::string* type,
                std::string* body) {
    bool found = false;
    Error e = m->page(path, authorization, &found, type, body);
    if (e) {
      *status = 401;
      *type = "application/json";
      *body = "{\"error\":\"" + e.message() + "\",\"code\":" + std::to_string(static_cast<int>(e.code())) + "}";
      return true;
    }
    return found;
  };
  return ho;
}

// A member that waits for a leader (peers down, or restarted alone) says so
// on its client URLs (http:// and https://) and --listen-metrics-urls
// instead of leaving connections unanswered: the health endpoints and
// /metrics answer from now on (/health 503 "RAFT NO LEADER", /readyz 503
// with linearizable_read failed), no JSON gateway; gRPC connections wait
// (held, as in the listen backlog) until serve_clients(). The URLs of
// --listen-client-http-urls alike. etcd 3.6 answers nothing on its client
// URLs, --listen-client-http-urls included, until it is ready (measured:
// 5 s curl timeouts restarted alone), only on --listen-metrics-urls.
Error Host::serve_health_early() {
  // The version gauges and client byte counters etcd shows from its start,
  // before the client server exists (server/grpc_metrics.h).
  server::register_client_metrics();
  http::HttpOptions ho = health_options();
  ho.gateway_channel = nullptr;  // /v3/... answer 404 until the member serves
  // --listen-metrics-urls: metrics and health only, as etcd's metrics
  // listener (embed/etcd.go serveMetrics); no JSON gateway there, ever.
  http::HttpOptions metrics_opts = ho;
  early_http_ = std::make_unique<http::HttpServer>(std::move(ho));
  http1_route_ = early_http_.get();
  if (!cfg_.listen_metrics_urls.empty()) {
    metrics_server_ = std::make_unique<http::HttpServer>(std::move(metrics_opts));
    auto listen_metrics = addresses(cfg_.listen_metrics_urls, "http");
    if (Error e = metrics_server_->start(listen_metrics)) return e;
    for (const auto& [host, port] : listen_metrics) {
      spdlog::info("serving /metrics and /health on http://{}:{}", host, port);
    }
  }
  if (Error e = client_mux_->start()) return e;
  if (client_http_mux_) {
    if (Error e = client_http_mux_->start()) return e;
    for (const auto& [host, port] : addresses(cfg_.listen_client_http_urls, "http")) {
      spdlog::info("serving HTTP (/metrics, /health; the gateway once the member serves) on http://{}:{}", host, port);
    }
  }
  for (auto& l : tls_listeners_) {
    if (Error e = l->start()) return e;
  }
  return {};
}

Error Host::serve_peers() {
  peer_server_ = std::make_unique<server::PeerServer>(&member_->context());
  Error e = peer_server_->start();
  if (!e) e = peer_tls_listener_ ? peer_tls_listener_->start() : peer_mux_->start();
  return e;
}

// The client URLs serve gRPC and HTTP/1.1 on one port, as etcd's do
// (net/mux.h tells the two apart); with --listen-client-http-urls, HTTP
// moves there and the client URLs serve gRPC only (etcd 3.5).
Error Host::serve_clients() {
  member::Member* m = member_.get();
  client_server_ = std::make_unique<server::ClientServer>(&m->context(),
                                                          std::chrono::milliseconds(cfg_.watch_progress_notify_ms),
                                                          std::chrono::milliseconds(cfg_.member.election_ms));
  if (Error e = client_server_->start({})) return e;
  http::HttpOptions ho = health_options();
  // The JSON gateway calls the client server above (http/gateway.h).
  ho.gateway_channel = client_server_->in_process_channel();
  server::ClientServer* grpc_side = client_server_.get();
  ho.grpc_unary_started = [grpc_side] { return grpc_side->unary_calls_started(); };
  http_server_ = std::make_unique<http::HttpServer>(std::move(ho));
  if (Error e = http_server_->start({})) return e;  // it serves connections the listeners hand it
  // The listeners (running since serve_health_early()) reach the servers
  // made above from now on.
  http1_route_ = http_server_.get();
  // gRPC last: a client that got an answer there finds every other URL
  // (--listen-client-http-urls) serving too, as before a member served
  // health early.
  {
    std::lock_guard<std::mutex> lock(held_mu_);
    grpc_ready_ = true;
    for (int fd : held_grpc_) client_server_->adopt(fd);
    held_grpc_.clear();
  }
  spdlog::info("ready to serve client requests on {}", cfg_.listen_client_urls.front().text);
  return {};
}

void Host::stop() {
  if (stopped_) return;
  stopped_ = true;
  // In-flight proposals finish and are answered; new ones get "server
  // stopped"; then the servers close, and every watch stream ends with
  // Unavailable (clients resume from their last revision).
  if (client_mux_) client_mux_->stop();  // no new connections for the servers below
  if (client_http_mux_) client_http_mux_->stop();
  {
    std::lock_guard<std::mutex> lock(held_mu_);
    for (int fd : held_grpc_) ::close(fd);
    held_grpc_.clear();
  }
  if (early_http_) early_http_->stop();
  for (auto& l : tls_listeners_) l->stop_accepting();
  if (http_server_) http_server_->stop();
  if (metrics_server_) metrics_server_->stop();
  if (health_timer_) health_timer_->stop();  // its checks call the member
  if (member_) member_->stop();
  // After consensus stopped: libraft talked to the others until then.
  if (peer_mux_) peer_mux_->stop();
  if (peer_tls_listener_) peer_tls_listener_->stop();
  peer_server_.reset();
  if (client_server_) client_server_->shutdown(kClientGraceMs);
  for (auto& l : tls_listeners_) l->stop();  // after the servers ended their streams
  // The services (watch progress, lock/election waits) use the member's
  // parts: they go first.
  client_server_.reset();
  member_.reset();
  peer_dialer_.reset();  // after libraft closed its connections
}

}  // namespace etcdq::host
