// etcdq: one member. Flags -> member (member/member.h: the state database,
// Raft, queues, leader-only work) -> servers (peer URL, then client URLs
// and HTTP), until SIGTERM or SIGINT, when it stops taking proposals, lets
// in-flight ones finish, and closes everything.
#include <absl/synchronization/mutex.h>
#include <signal.h>
#include <sys/resource.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/bootstrap_check.h"
#include "cli/flags.h"
#include "cli/snapshot_restore.h"
#include "http/server.h"
#include "member/member.h"
#include "net/mux.h"
#include "net/tls_context.h"
#include "net/grpc_fd_guard.h"
#include "net/tls_listener.h"
#include "cli/peer_tls.h"
#include "raft/forwarder.h"
#include "raft/transport.h"
#include "server/peer_server.h"
#include "server/maintenance_service.h"
#include "server/downgrade.h"
#include "server/server.h"

using namespace etcdq;

namespace {

// zap's level names (etcd's log lines say "warn" and "fatal"; spdlog's own
// %l says "warning" and "critical"); a member logs critical only as it
// stops for a fault, which is zap's fatal.
class ZapLevel final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string_view name = "info";
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: name = "debug"; break;
      case spdlog::level::warn: name = "warn"; break;
      case spdlog::level::err: name = "error"; break;
      case spdlog::level::critical: name = "fatal"; break;
      default: break;
    }
    dest.append(name.data(), name.data() + name.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<ZapLevel>(); }
};

// etcd's --logger/--log-outputs/--log-level (embed/config_logging.go): one
// logger writing etcd's JSON lines to every output. Errors: a file output
// that cannot be opened, in etcd's words.
Error setup_logging(const cli::Config& cfg) {
  std::vector<spdlog::sink_ptr> sinks;
  for (const auto& out : cfg.log_outputs) {
    if (out == "default" || out == "stderr" || out == "journal") {
      sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
    } else if (out == "stdout") {
      sinks.push_back(std::make_shared<spdlog::sinks::stdout_sink_mt>());
    } else {
      // spdlog would create missing directories; etcd (zap) refuses instead.
      std::filesystem::path parent = std::filesystem::absolute(out).parent_path();
      std::error_code ec;
      if (!std::filesystem::is_directory(parent, ec)) {
        return {Code::kInvalidArgument, "open sink \"" + out + "\": open " + out + ": no such file or directory"};
      }
      try {
        sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(out, /*truncate=*/false));
      } catch (const spdlog::spdlog_ex& e) {
        return {Code::kInvalidArgument, "open sink \"" + out + "\": " + e.what()};
      }
    }
  }
  auto logger = std::make_shared<spdlog::logger>("etcdq", sinks.begin(), sinks.end());
  // JSON lines, as etcd logs, with zap's level names (%*: ZapLevel).
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<ZapLevel>('*').set_pattern(R"({"level":"%*","ts":"%Y-%m-%dT%H:%M:%S.%f%z","msg":"%v"})");
  logger->set_formatter(std::move(formatter));
  spdlog::set_default_logger(logger);
  const std::string& level = cfg.log_level;
  if (level == "debug") spdlog::set_level(spdlog::level::debug);
  else if (level == "warn") spdlog::set_level(spdlog::level::warn);
  else if (level == "error") spdlog::set_level(spdlog::level::err);
  else if (level == "panic" || level == "fatal") spdlog::set_level(spdlog::level::critical);
  else spdlog::set_level(spdlog::level::info);
  spdlog::flush_on(spdlog::level::info);
  return {};
}

// Client TLS (net/tls_context.h) from etcd's flags; with --auto-tls, a
// self-signed certificate in <data-dir>/fixtures/client, as etcd's
// ClientSelfCert. Every file is read here, so a bad one stops the start
// before the data dir is opened.
Error open_client_tls(const cli::Config& cfg, std::shared_ptr<net::TlsContext>* out) {
  // etcd 3.6 serves client TLS through Go's HTTP/2 server, which refuses a
  // TLS 1.2 cipher-suite list without an AES-128-GCM one (http2's
  // ConfigureServer; a TLS 1.3-only list is refused before this).
  if (!cfg.cipher_suites.empty() &&
      std::none_of(cfg.cipher_suites.begin(), cfg.cipher_suites.end(), [](const std::string& s) {
        return s == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" || s == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256";
      })) {
    return {Code::kInvalidArgument,
            "http2: TLSConfig.CipherSuites is missing an HTTP/2-required AES_128_GCM_SHA256 cipher (need at least "
            "one of TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)"};
  }
  net::TlsOptions o;
  o.cert_file = cfg.client_security.cert_file;
  o.key_file = cfg.client_security.key_file;
  o.trusted_ca_file = cfg.client_security.trusted_ca_file;
  o.client_cert_auth = cfg.client_security.client_cert_auth;
  o.crl_file = cfg.client_crl_file;
  o.cipher_suites = cfg.cipher_suites;
  o.min_version = cfg.tls_min_version;
  o.max_version = cfg.tls_max_version;
  if (cfg.client_security.auto_tls) {
    std::vector<std::string> hosts;
    for (const auto& u : cfg.listen_client_urls) hosts.push_back(u.host);
    std::string dir = (std::filesystem::path(cfg.data_dir) / "fixtures" / "client").string();
    if (Error e = net::self_signed_cert(dir, hosts, &o.cert_file, &o.key_file)) return e;
  }
  return net::TlsContext::open(std::move(o), out);
}

// (host, port) of the URLs with the given scheme.
std::vector<std::pair<std::string, int>> addresses(const std::vector<cli::Url>& urls, const std::string& scheme) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& u : urls) {
    if (u.scheme == scheme) out.emplace_back(u.host, u.port);
  }
  return out;
}

// A JSON string's contents, as zap writes them: quote, backslash and
// control characters escaped, the rest as given.
std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// Flags refused before logging is set up, as etcd 3.6 refuses them
// (etcdmain/etcd.go): an error of Go's flag package itself (an unknown
// flag, a value its type cannot take) as that package prints it, exit 2;
// any other, a value etcd's checks refuse, as etcd's zap line
// {"level":"warn",...,"msg":"failed to verify flags","error":"..."}, exit 1.
int refuse_flags(const std::string& error) {
  static constexpr std::string_view kGoFlagErrors[] = {"flag provided but not defined: ", "invalid value ",
                                                       "flag needs an argument: ", "bad flag syntax: "};
  for (std::string_view prefix : kGoFlagErrors) {
    if (error.starts_with(prefix)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 2;
    }
  }
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char ts[40];
  std::size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(ts + n, sizeof ts - n, ".%06lldZ", static_cast<long long>(micros));
  std::fprintf(stderr, "{\"level\":\"warn\",\"ts\":\"%s\",\"msg\":\"failed to verify flags\",\"error\":\"%s\"}\n", ts,
               json_escape(error).c_str());
  return 1;
}

int fail(const std::string& msg) {
  spdlog::critical("{}", msg);
  std::fprintf(stderr, "etcdq: %s\n", msg.c_str());
  return 1;
}

// SIGTERM/SIGINT received since the mask was set, without waiting.
bool stop_signal_pending(const sigset_t& sigs) {
  timespec zero{0, 0};
  return sigtimedwait(&sigs, nullptr, &zero) > 0;
}

}  // namespace

int main(int argc, char** argv) {
  // `etcdq snapshot restore FILE ...`: an offline command (cli/snapshot_restore.h).
  if (argc >= 2 && std::string_view(argv[1]) == "snapshot") return cli::snapshot_main(argc - 1, argv + 1);
  // Descriptors: each TLS connection holds three (the socket and a
  // socketpair), a Raft one three too. Raise the soft limit to the hard
  // one, as Go's runtime does for etcd (Go 1.19), so that the servers' own
  // bounds engage before the process runs out.
  if (rlimit nofile{}; getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  // Every thread inherits this mask; only main takes the stop signals.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Debian's abseil checks every gRPC mutex for lock-order cycles, which
  // showed up as ~4% of a put-heavy profile; it is a debugging aid.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  cli::Config cfg;
  bool exit_now = false;
  if (Error e = cli::parse_flags(argc, argv, &cfg, &exit_now)) return refuse_flags(e.message());
  if (cfg.print_version) {
    std::printf("etcdq Version: %s\nAPI Version: 3.5\n", ETCDQ_VERSION);
    return 0;
  }
  if (exit_now) return 0;
  if (Error e = setup_logging(cfg)) return refuse_flags(e.message());
  for (const auto& note : cfg.notes) spdlog::info("{}", note);
  for (const auto& warning : cfg.warnings) spdlog::warn("{}", warning);
  if (std::find(cfg.log_outputs.begin(), cfg.log_outputs.end(), "journal") != cfg.log_outputs.end()) {
    spdlog::warn("--log-outputs=journal: etcdq writes to stderr, which systemd puts in the journal");
  }

  std::shared_ptr<net::TlsContext> client_tls;
  if (cfg.client_tls()) {
    if (Error e = open_client_tls(cfg, &client_tls)) return fail(e.message());
  }
  // Peer TLS (cli/peer_tls.h): libraft's outgoing connections run TLS in
  // peer_dialer; the Peer service's calls use gRPC's TLS credentials.
  std::shared_ptr<net::TlsContext> peer_tls;
  std::unique_ptr<net::TlsPump> peer_dialer;
  if (cfg.peer_tls()) {
    if (Error e = cli::open_peer_tls(cfg, &peer_tls)) return fail(e.message());
    etcdq::raft::Forwarder::set_peer_credentials(cli::peer_channel_credentials(peer_tls->options()));
    peer_dialer = std::make_unique<net::TlsPump>(peer_tls, net::TlsPump::Routes{}, "peer");
    if (Error e = peer_dialer->start()) return fail(e.message());
  }

  // Flags -> member -> servers.
  std::vector<std::pair<std::string, cli::Url>> initial;
  if (Error e = cli::parse_initial_cluster(cfg.initial_cluster, &initial)) return fail(e.message());
  // etcd's memberInitialized: a data dir that held a member before.
  const bool member_initialized = std::filesystem::exists(std::filesystem::path(cfg.data_dir) / "member");
  if (Error e = cli::check_advertise_matches_cluster(cfg.name, initial, cfg.initial_advertise_peer_urls,
                                                     !member_initialized)) {
    return fail(e.message());
  }
  member::Options mo;
  for (const auto& entry : initial) {
    const std::string& name = entry.first;  // (clang 14 cannot capture a structured binding)
    const cli::Url& url = entry.second;
    auto it = std::find_if(mo.initial_cluster.begin(), mo.initial_cluster.end(),
                           [&name](const member::InitialMember& m) { return m.name == name; });
    if (it == mo.initial_cluster.end()) {
      mo.initial_cluster.push_back({name, {}, url.host_port()});
      it = std::prev(mo.initial_cluster.end());
    }
    it->peer_urls.push_back(url.text);
  }
  mo.name = cfg.name;
  mo.data_dir = cfg.data_dir;
  mo.join = cfg.initial_cluster_state == "existing";
  mo.cluster_token = cfg.initial_cluster_token;
  for (const auto& u : cfg.advertise_client_urls) mo.advertise_client_urls.push_back(u.text);
  mo.limits.max_request_bytes = cfg.max_request_bytes;
  mo.limits.max_txn_ops = cfg.max_txn_ops;
  mo.limits.bcrypt_cost = cfg.bcrypt_cost;
  mo.auth_token_ttl_seconds = cfg.auth_token_ttl;
  if (cfg.jwt) {
    // Refused before anything is opened, as etcd refuses to start.
    std::unique_ptr<auth::JwtTokens> jwt;
    if (Error e = auth::JwtTokens::create(cfg.jwt_options, &jwt)) return fail(e.message());
    mo.jwt = std::move(jwt);
  }
  mo.limits.quota_bytes = cfg.quota_backend_bytes == 0 ? (2LL << 30) : cfg.quota_backend_bytes;
  mo.heartbeat_ms = cfg.heartbeat_ms;
  mo.election_ms = cfg.election_ms;
  mo.snapshot_count = cfg.snapshot_count;
  mo.strict_reconfig_check = cfg.strict_reconfig_check;
  mo.pre_vote = cfg.pre_vote;
  mo.wal_dir = cfg.wal_dir;
  mo.force_new_cluster = cfg.force_new_cluster;
  mo.max_learners = static_cast<unsigned>(cfg.max_learners);
  mo.snapshot_catchup_entries = cfg.snapshot_catchup_entries;
  mo.auto_compaction_mode = cfg.auto_compaction_mode;
  mo.auto_compaction_retention = cfg.auto_compaction_retention;
  mo.corrupt_check_ms = cfg.corrupt_check_ms;
  mo.clickhouse_url = cfg.clickhouse_url;
  mo.clickhouse_db = cfg.clickhouse_db;
  mo.version = ETCDQ_VERSION;
  mo.stop_requested = [&sigs] { return stop_signal_pending(sigs); };
  if (peer_dialer) {
    mo.peer_tls_dial = [d = peer_dialer.get()](int tcp, int plain, const std::string& host) { d->dial(tcp, plain, host); };
  }
  static std::atomic<bool> removed{false};
  mo.on_removed = [] {
    removed = true;
    kill(getpid(), SIGTERM);  // main's sigwait shuts down in order
  };

  std::unique_ptr<member::Member> m;
  bool stopped = false;
  if (Error e = member::Member::open(mo, &m, &stopped)) return fail(e.message());
  if (stopped) return 0;
  member::Context& ctx = m->context();
  // Before any peer or client is served, as etcd (embed/etcd.go); a new
  // member has nothing to compare.
  if (cfg.initial_corrupt_check && member_initialized) {
    if (Error e = m->initial_corruption_check()) {
      spdlog::error("checkInitialHashKV failed: {}", e.message());
      m->stop();
      return fail("discovery failed: " + e.message());
    }
  }

  // Member-only traffic on the peer URL only, one listener (net/mux.h):
  // HTTP/2 to the Peer service, libraft's raw connections (they open with
  // raft/transport.h's magic) to consensus.
  auto peer_server = std::make_unique<server::PeerServer>(&ctx);
  if (Error e = peer_server->start()) {
    m->stop();
    return fail(e.message());
  }
  net::Mux::Routes peer_routes;
  server::PeerServer* ps = peer_server.get();
  member::Member* raft_member = m.get();
  peer_routes.http2 = [ps](int fd) { ps->adopt(fd); };
  peer_routes.prefixed.push_back(
      {std::string(etcdq::raft::PeerTransport::kMagic), [raft_member](int fd) { raft_member->adopt_raft_connection(fd); }});
  // https:// peer URLs: the same routes behind TLS (net/tls_pump.h), and
  // nothing in plaintext.
  std::unique_ptr<net::Mux> peer_mux;
  std::unique_ptr<net::TlsListener> peer_tls_listener;
  {
    std::vector<std::pair<std::string, int>> listen_peer;
    for (const auto& u : cfg.listen_peer_urls) listen_peer.emplace_back(u.host, u.port);
    Error e;
    if (peer_tls) {
      net::TlsPump::Routes tr{peer_routes.http2, nullptr, {}};
      tr.prefixed.push_back({peer_routes.prefixed[0].magic, peer_routes.prefixed[0].route});
      peer_tls_listener = std::make_unique<net::TlsListener>(peer_tls, std::move(tr), "peer");
      e = peer_tls_listener->listen(listen_peer);
      if (!e) e = peer_tls_listener->start();
    } else {
      // Plain HTTP/2 passes the guard inside gRPC's reads (net/grpc_fd_guard.h).
      peer_routes.http2 = net::guarded_route(peer_routes.http2, "peer");
      peer_mux = std::make_unique<net::Mux>(std::move(peer_routes), "peer");
      e = peer_mux->listen(listen_peer);
      if (!e) e = peer_mux->start();
    }
    if (e) {
      m->stop();
      return fail(e.message());
    }
  }
  if (!m->join()) {
    m->stop();
    return 0;
  }

  // The client URLs serve gRPC and HTTP/1.1 on one port, as etcd's do
  // (net/mux.h tells the two apart); with --listen-client-http-urls, HTTP
  // moves there and the client URLs serve gRPC only (etcd 3.5).
  auto client_server =
      std::make_unique<server::ClientServer>(&ctx, std::chrono::milliseconds(cfg.watch_progress_notify_ms));
  if (Error e = client_server->start({})) {
    m->stop();
    return fail(e.message());
  }
  http::HttpOptions ho;
  member::Member* mp = m.get();
  ho.health.has_leader = [mp] { return mp->has_leader(); };
  ho.health.is_learner = [mp] { return mp->is_learner(); };
  ho.health.alarms = [mp] { return mp->active_alarms(); };
  ho.health.read = [mp](bool serializable, std::function<void(std::string)> done) {
    mp->health_read(serializable, [done = std::move(done)](Error e) { done(e.message()); });
  };
  ho.health_read_timeout = mp->request_timeout();
  // The etcd version etcdq answers as, as Maintenance.Status does: clients
  // decide what to send from it (etcdq's own is `etcdq --version`).
  ho.server_version = server::kEtcdApiVersion;
  ho.cluster_version = server::kEtcdApiVersion;
  ho.storage_version = server::storage_version(server::kEtcdApiVersion);
  // The JSON gateway calls the client server above (http/gateway.h).
  ho.gateway_channel = client_server->in_process_channel();
  server::ClientServer* grpc_side = client_server.get();
  ho.grpc_unary_started = [grpc_side] { return grpc_side->unary_calls_started(); };
  ho.max_request_bytes = cfg.max_request_bytes;
  http::HttpServer http_server(ho);
  // https:// URLs: TLS ends in net/tls_pump.h, the plaintext goes where a
  // plain URL's would (each kind below gets a TlsListener of its own).
  std::vector<std::unique_ptr<net::TlsListener>> tls_listeners;
  auto listen_tls = [&](const std::vector<cli::Url>& urls, net::TlsPump::Routes routes, const char* role) -> Error {
    auto tls = addresses(urls, "https");
    if (tls.empty()) return {};
    auto l = std::make_unique<net::TlsListener>(client_tls, std::move(routes), role);
    Error e = l->listen(tls);
    if (!e) e = l->start();
    tls_listeners.push_back(std::move(l));
    return e;
  };
  {
    auto listen_http = addresses(cfg.listen_client_http_urls, "http");
    if (Error e = http_server.start(listen_http)) {
      m->stop();
      return fail(e.message());
    }
    for (const auto& [host, port] : listen_http) spdlog::info("serving HTTP (gateway, /metrics, /health) on http://{}:{}", host, port);
    if (Error e = listen_tls(cfg.listen_client_http_urls, {nullptr, [&http_server](int fd) { http_server.adopt(fd); }, {}},
                             "client HTTP")) {
      m->stop();
      return fail(e.message());
    }
  }
  // --listen-metrics-urls: metrics and health only, as etcd's metrics
  // listener (embed/etcd.go serveMetrics); no JSON gateway there.
  http::HttpOptions metrics_opts = ho;
  metrics_opts.gateway_channel = nullptr;
  std::unique_ptr<http::HttpServer> metrics_server;
  if (!cfg.listen_metrics_urls.empty()) {
    metrics_server = std::make_unique<http::HttpServer>(metrics_opts);
    auto listen_metrics = addresses(cfg.listen_metrics_urls, "http");
    http::HttpServer* ms = metrics_server.get();
    Error e = metrics_server->start(listen_metrics);
    if (!e) e = listen_tls(cfg.listen_metrics_urls, {nullptr, [ms](int fd) { ms->adopt(fd); }, {}}, "metrics");
    if (e) {
      m->stop();
      return fail(e.message());
    }
    for (const auto& [host, port] : listen_metrics) spdlog::info("serving /metrics and /health on http://{}:{}", host, port);
  }

  server::ClientServer* cs = client_server.get();
  net::Mux::Routes routes;
  routes.http2 = [cs](int fd) { cs->adopt(fd); };
  if (cfg.listen_client_http_urls.empty()) routes.http1 = [&http_server](int fd) { http_server.adopt(fd); };
  net::TlsPump::Routes tls_routes{routes.http2, routes.http1, {}};
  // HTTP/2 passes net/h2_guard.h: TLS in its pump, plaintext inside gRPC's
  // reads (net/grpc_fd_guard.h).
  routes.http2 = net::guarded_route(routes.http2, "client");
  net::Mux client_mux(std::move(routes));
  {
    Error e = client_mux.listen(addresses(cfg.listen_client_urls, "http"));
    if (!e) e = client_mux.start();
    if (!e) e = listen_tls(cfg.listen_client_urls, std::move(tls_routes), "client");
    if (e) {
      m->stop();
      return fail(e.message());
    }
  }
  spdlog::info("ready to serve client requests on {}", cfg.listen_client_urls.front().text);

  int sig = 0;
  sigwait(&sigs, &sig);

  if (removed) {
    spdlog::info("removed from the cluster, shutting down");
  } else {
    spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  // In-flight proposals finish and are answered; new ones get "server
  // stopped"; then the servers close, and every watch stream ends with
  // Unavailable (clients resume from their last revision).
  client_mux.stop();  // no new connections for the servers below
  for (auto& l : tls_listeners) l->stop_accepting();
  http_server.stop();
  if (metrics_server) metrics_server->stop();
  m->stop();
  // After consensus stopped: libraft talked to the others until then.
  if (peer_mux) peer_mux->stop();
  if (peer_tls_listener) peer_tls_listener->stop();
  peer_server.reset();
  client_server->shutdown(1000);
  for (auto& l : tls_listeners) l->stop();  // after the servers ended their streams
  // The services (watch progress, lock/election waits) use the member's
  // parts: they go first.
  client_server.reset();
  m.reset();
  peer_dialer.reset();  // after libraft closed its connections
  spdlog::info("stopped");
  return 0;
}
