#include "cli/flags.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "net/tls_context.h"

namespace etcdq::cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Error parse_urls(const std::string& flag, const std::string& s, std::vector<Url>* out) {
  out->clear();
  for (const auto& part : split(s, ',')) {
    Url u;
    if (Error e = parse_url(part, &u)) return {Code::kInvalidArgument, "--" + flag + ": " + e.message()};
    out->push_back(u);
  }
  if (out->empty()) return {Code::kInvalidArgument, "--" + flag + " needs at least one URL"};
  return {};
}

}  // namespace

Error parse_url(const std::string& s, Url* out) {
  auto p = s.find("://");
  if (p == std::string::npos) return {Code::kInvalidArgument, "URL " + s + " has no scheme"};
  out->text = s;
  out->scheme = s.substr(0, p);
  if (out->scheme != "http" && out->scheme != "https") {
    return {Code::kInvalidArgument, "URL " + s + ": only http:// and https:// are supported"};
  }
  std::string rest = s.substr(p + 3);
  if (auto slash = rest.find('/'); slash != std::string::npos) rest = rest.substr(0, slash);
  auto colon = rest.rfind(':');
  if (colon == std::string::npos) return {Code::kInvalidArgument, "URL " + s + " has no port"};
  out->host = rest.substr(0, colon);
  try {
    out->port = std::stoi(rest.substr(colon + 1));
  } catch (...) {
    return {Code::kInvalidArgument, "URL " + s + " has a bad port"};
  }
  if (out->port <= 0 || out->port > 65535) return {Code::kInvalidArgument, "URL " + s + " has a bad port"};
  if (out->host == "localhost") out->host = "127.0.0.1";
  return {};
}

Error parse_duration_ms(const std::string& s, int64_t* ms) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return {Code::kInvalidArgument, "bad duration " + s};
  double v = std::stod(s.substr(0, i));
  std::string unit = s.substr(i);
  double scale = unit == "ms" ? 1 : unit == "s" ? 1000 : unit == "m" ? 60000 : unit == "h" ? 3600000 : -1;
  if (scale < 0) return {Code::kInvalidArgument, "bad duration " + s + " (use ms, s, m or h)"};
  *ms = static_cast<int64_t>(v * scale);
  if (*ms <= 0) return {Code::kInvalidArgument, "duration " + s + " must be positive"};
  return {};
}

Error parse_initial_cluster(const std::string& s, std::vector<std::pair<std::string, Url>>* out) {
  for (const auto& part : split(s, ',')) {
    auto eq = part.find('=');
    if (eq == std::string::npos) return {Code::kInvalidArgument, "--initial-cluster: " + part + " is not name=url"};
    Url u;
    if (Error e = parse_url(part.substr(eq + 1), &u)) return {Code::kInvalidArgument, "--initial-cluster: " + e.message()};
    out->emplace_back(part.substr(0, eq), u);
  }
  return {};
}

namespace {

// The command line's raw values that need more than CLI11's conversion.
struct Raw {
  std::string listen_client = "http://127.0.0.1:2379";
  std::string advertise_client;
  std::string listen_peer = "http://127.0.0.1:2380";
  std::string advertise_peer;
  std::string listen_http;
  std::string listen_metrics;
  std::string progress = "10m";
  std::string auto_compaction_mode = "periodic";
  std::string auto_compaction_retention = "0";
  std::string log_outputs;
  std::string cipher_suites;
  std::string peer_allowed_cn;
  std::string peer_allowed_hostname;
  // etcd 3.6's additions.
  std::string progress_new = "10m";  // --watch-progress-notify-interval
  std::string feature_gates;
  std::string client_allowed_hostname;
  uint64_t catchup = 0, catchup_experimental = 0;
  std::map<std::string, std::string> ignored_storage;  // cli/ignored_flags.h
  // Which of the flags above were given (command line, ETCD_* or the file).
  std::set<std::string> given;
  std::string corrupt_check_time;               // "": not given
  std::string experimental_corrupt_check_time;  // "": not given
};

// Every flag, defined once: the command line and the config file both go
// through these. with_env: also read ETCD_* (not with a config file).
void define(CLI::App& app, Config* c, Raw* r, bool with_env) {
  auto env = [with_env](const char* name) { return with_env ? std::string(name) : std::string(); };
  // A flag given twice takes its last value, as Go's flag package does
  // (unit files often append an override).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
  app.add_option("--name", c->name, "Human-readable name for this member")->envname(env("ETCD_NAME"));
  app.add_option("--data-dir", c->data_dir, "Path to the data directory (default <name>.etcdq)")
      ->envname(env("ETCD_DATA_DIR"));
  app.add_option("--listen-client-urls", r->listen_client, "URLs to listen on for client traffic")
      ->envname(env("ETCD_LISTEN_CLIENT_URLS"));
  app.add_option("--advertise-client-urls", r->advertise_client, "Client URLs to advertise to the cluster")
      ->envname(env("ETCD_ADVERTISE_CLIENT_URLS"));
  app.add_option("--listen-peer-urls", r->listen_peer, "URLs to listen on for peer traffic")
      ->envname(env("ETCD_LISTEN_PEER_URLS"));
  app.add_option("--initial-advertise-peer-urls", r->advertise_peer, "Peer URLs to advertise to the cluster")
      ->envname(env("ETCD_INITIAL_ADVERTISE_PEER_URLS"));
  app.add_option("--listen-client-http-urls", r->listen_http,
                 "URLs to serve HTTP on (/metrics, /health, /version) instead of the client URLs")
      ->envname(env("ETCD_LISTEN_CLIENT_HTTP_URLS"));
  app.add_option("--listen-metrics-urls", r->listen_metrics, "More URLs to serve /metrics, /health and /version on")
      ->envname(env("ETCD_LISTEN_METRICS_URLS"));
  app.add_option("--clickhouse-url", c->clickhouse_url,
                 "ClickHouse HTTP interface (http://host:8123) that ch:{table} queues insert into (the table needs "
                 "columns etcdq_queue String and etcdq_idx UInt64; scripts/clickhouse.sh starts a ClickHouse)")
      ->envname(env("ETCDQ_CLICKHOUSE_URL"));
  app.add_option("--clickhouse-db", c->clickhouse_db, "ClickHouse database of the ch:{table} queues' tables")
      ->envname(env("ETCDQ_CLICKHOUSE_DB"));
  app.add_option("--initial-cluster", c->initial_cluster, "Initial cluster configuration: name=peerURL,...")
      ->envname(env("ETCD_INITIAL_CLUSTER"));
  app.add_option("--initial-cluster-state", c->initial_cluster_state, "new or existing")
      ->envname(env("ETCD_INITIAL_CLUSTER_STATE"));
  app.add_option("--initial-cluster-token", c->initial_cluster_token, "Initial cluster token")
      ->envname(env("ETCD_INITIAL_CLUSTER_TOKEN"));
  app.add_option("--max-request-bytes", c->max_request_bytes, "Maximum client request size in bytes")
      ->envname(env("ETCD_MAX_REQUEST_BYTES"))
      ->check(CLI::PositiveNumber);
  app.add_option("--max-txn-ops", c->max_txn_ops, "Maximum number of operations in a transaction")
      ->envname(env("ETCD_MAX_TXN_OPS"))
      ->check(CLI::PositiveNumber);
  app.add_option("--quota-backend-bytes", c->quota_backend_bytes,
                 "Raise the NOSPACE alarm when the database exceeds this many bytes (0: 2 GiB)")
      ->envname(env("ETCD_QUOTA_BACKEND_BYTES"));
  app.add_option("--auth-token", c->auth_token, "Auth token: simple, or jwt,pub-key=FILE,priv-key=FILE,sign-method=RS256,ttl=5m")->envname(env("ETCD_AUTH_TOKEN"));
  app.add_option("--auth-token-ttl", c->auth_token_ttl, "Seconds a simple token lives after its last use")
      ->envname(env("ETCD_AUTH_TOKEN_TTL"))
      ->check(CLI::PositiveNumber);
  app.add_option("--bcrypt-cost", c->bcrypt_cost, "bcrypt cost of password hashes (4..31)")
      ->envname(env("ETCD_BCRYPT_COST"))
      ->check(CLI::Range(4, 31));
  app.add_option("--heartbeat-interval", c->heartbeat_ms, "Time (ms) of a heartbeat interval")
      ->envname(env("ETCD_HEARTBEAT_INTERVAL"));
  app.add_option("--election-timeout", c->election_ms, "Time (ms) for an election to time out")
      ->envname(env("ETCD_ELECTION_TIMEOUT"));
  app.add_option("--snapshot-count", c->snapshot_count,
                 "Requests applied between Raft snapshots (as etcd counts them; an etcdq log entry carries many)")
      ->envname(env("ETCD_SNAPSHOT_COUNT"))
      ->check(CLI::PositiveNumber);
  app.add_flag("--pre-vote", c->pre_vote, "Enable the Raft pre-vote phase (default on, as etcd 3.5; --pre-vote=false)")
      ->envname(env("ETCD_PRE_VOTE"));
  app.add_flag("--strict-reconfig-check", c->strict_reconfig_check,
               "Reject reconfiguration requests that would cause quorum loss (default on; =false turns it off)")
      ->envname(env("ETCD_STRICT_RECONFIG_CHECK"));
  app.add_option("--log-level", c->log_level, "debug, info, warn, error, panic or fatal")
      ->envname(env("ETCD_LOG_LEVEL"))
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "panic", "fatal"}));
  app.add_option("--experimental-watch-progress-notify-interval", r->progress,
                 "How often watchers with progress_notify get a progress response")
      ->envname(env("ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL"));
  // Corruption checks (member/corruption_check.h), as etcd 3.6 names them.
  app.add_flag("--experimental-initial-corrupt-check", c->initial_corrupt_check,
               "Check data corruption against the other members before serving")
      ->envname(env("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK"));
  app.add_option("--corrupt-check-time", r->corrupt_check_time,
                 "Duration between the leader's cluster corruption checks (0s: none)")
      ->envname(env("ETCD_CORRUPT_CHECK_TIME"));
  app.add_option("--experimental-corrupt-check-time", r->experimental_corrupt_check_time,
                 "Deprecated: use --corrupt-check-time")
      ->envname(env("ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME"));
  app.add_option("--auto-compaction-mode", r->auto_compaction_mode,
                 "periodic (retention is a duration; a bare number means hours) or revision (a revision count)")
      ->envname(env("ETCD_AUTO_COMPACTION_MODE"));
  app.add_option("--auto-compaction-retention", r->auto_compaction_retention,
                 "How much history auto-compaction keeps; 0 turns it off")
      ->envname(env("ETCD_AUTO_COMPACTION_RETENTION"));
  app.add_option("--logger", c->logger, "zap (etcd's JSON lines), the only logger etcd 3.6 has")
      ->envname(env("ETCD_LOGGER"));
  app.add_option("--log-outputs", r->log_outputs,
                 "Where logs go, comma-separated: default (stderr), stderr, stdout, journal, or file paths")
      ->envname(env("ETCD_LOG_OUTPUTS"));
  // Client TLS (net/tls_context.h); in a config file these come from its
  // client-transport-security block instead (etcd's yaml has no such keys).
  app.add_option("--cert-file", c->client_security.cert_file, "Path to the client server TLS cert file")
      ->envname(env("ETCD_CERT_FILE"));
  app.add_option("--key-file", c->client_security.key_file, "Path to the client server TLS key file")
      ->envname(env("ETCD_KEY_FILE"));
  app.add_option("--trusted-ca-file", c->client_security.trusted_ca_file,
                 "Path to the client server TLS trusted CA cert file")
      ->envname(env("ETCD_TRUSTED_CA_FILE"));
  app.add_flag("--client-cert-auth", c->client_security.client_cert_auth, "Enable client cert authentication")
      ->envname(env("ETCD_CLIENT_CERT_AUTH"));
  app.add_option("--client-crl-file", c->client_crl_file, "Path to the client certificate revocation list file")
      ->envname(env("ETCD_CLIENT_CRL_FILE"));
  app.add_flag("--auto-tls", c->client_security.auto_tls, "Client TLS using generated certificates")
      ->envname(env("ETCD_AUTO_TLS"));
  app.add_option("--cipher-suites", r->cipher_suites,
                 "Comma-separated list of supported TLS cipher suites (Go's names; empty: OpenSSL's defaults)")
      ->envname(env("ETCD_CIPHER_SUITES"));
  app.add_option("--tls-min-version", c->tls_min_version, "Minimum TLS version: TLS1.2 or TLS1.3")
      ->envname(env("ETCD_TLS_MIN_VERSION"));
  app.add_option("--tls-max-version", c->tls_max_version, "Maximum TLS version: TLS1.2 or TLS1.3 (empty: the highest)")
      ->envname(env("ETCD_TLS_MAX_VERSION"));
  // Peer TLS (host/tls.h); in a config file, its peer-transport-security block.
  app.add_option("--peer-cert-file", c->peer_security.cert_file, "Path to the peer server TLS cert file")
      ->envname(env("ETCD_PEER_CERT_FILE"));
  app.add_option("--peer-key-file", c->peer_security.key_file, "Path to the peer server TLS key file")
      ->envname(env("ETCD_PEER_KEY_FILE"));
  app.add_option("--peer-trusted-ca-file", c->peer_security.trusted_ca_file,
                 "Path to the peer server TLS trusted CA file")
      ->envname(env("ETCD_PEER_TRUSTED_CA_FILE"));
  app.add_flag("--peer-client-cert-auth", c->peer_security.client_cert_auth, "Enable peer client cert authentication")
      ->envname(env("ETCD_PEER_CLIENT_CERT_AUTH"));
  app.add_option("--peer-crl-file", c->peer_crl_file, "Path to the peer certificate revocation list file")
      ->envname(env("ETCD_PEER_CRL_FILE"));
  app.add_flag("--peer-auto-tls", c->peer_security.auto_tls, "Peer TLS using generated certificates")
      ->envname(env("ETCD_PEER_AUTO_TLS"));
  app.add_option("--peer-cert-allowed-cn", r->peer_allowed_cn, "Allowed CN for inter peer authentication")
      ->envname(env("ETCD_PEER_CERT_ALLOWED_CN"));
  app.add_option("--peer-cert-allowed-hostname", r->peer_allowed_hostname,
                 "Allowed TLS hostname for inter peer authentication")
      ->envname(env("ETCD_PEER_CERT_ALLOWED_HOSTNAME"));
  app.add_option("--client-cert-allowed-hostname", r->client_allowed_hostname,
                 "Allowed SAN hostnames of client certificates (not supported yet: only empty)")
      ->envname(env("ETCD_CLIENT_CERT_ALLOWED_HOSTNAME"));
  // etcd 3.6 (README.md, "flags"): served here; the rest of 3.6's flags are
  // accepted and ignored (cli/ignored_flags.h).
  app.add_option("--wal-dir", c->wal_dir, "Directory of the Raft log (default <data-dir>/member/raft)")
      ->envname(env("ETCD_WAL_DIR"));
  app.add_flag("--force-new-cluster", c->force_new_cluster,
               "Restart this member's data as a one-member cluster (disaster recovery)")
      ->envname(env("ETCD_FORCE_NEW_CLUSTER"));
  app.add_option("--watch-progress-notify-interval", r->progress_new,
                 "How often watchers with progress_notify get a progress response")
      ->envname(env("ETCD_WATCH_PROGRESS_NOTIFY_INTERVAL"));
  app.add_option("--feature-gates", r->feature_gates, "etcd 3.6's feature gates: Name=true|false,...")
      ->envname(env("ETCD_FEATURE_GATES"));
  app.add_option("--max-learners", c->max_learners, "Learners the cluster may hold")
      ->envname(env("ETCD_MAX_LEARNERS"))
      ->check(CLI::NonNegativeNumber);
  app.add_option("--snapshot-catchup-entries", r->catchup,
                 "Requests kept in the log behind a snapshot for lagging followers (0: 5000, etcd's default, or --snapshot-count if smaller)")
      ->envname(env("ETCD_SNAPSHOT_CATCHUP_ENTRIES"));
  app.add_option("--experimental-snapshot-catchup-entries", r->catchup_experimental,
                 "Deprecated in etcd 3.6: --snapshot-catchup-entries")
      ->envname(env("ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES"));
  define_ignored_flags(app, with_env, &r->ignored_storage);
}

// After app.parse(): which flags were given, the ignored ones checked.
Error note_given(const CLI::App& app, Raw* r, Config* c) {
  for (const char* name : {"experimental-watch-progress-notify-interval", "watch-progress-notify-interval",
                           "snapshot-catchup-entries", "experimental-snapshot-catchup-entries", "feature-gates"}) {
    const CLI::Option* o = app.get_option_no_throw(std::string("--") + name);
    if (o != nullptr && o->count() > 0) r->given.insert(name);
  }
  return collect_ignored_flags(app, r->ignored_storage, &c->ignored);
}

// argv for CLI11, last argument first. Go's flag package takes
// "--flag=" as an empty value, which CLI11 reads as a missing one: it gets
// the empty value as the next argument instead.
std::vector<std::string> go_style_args(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      args.push_back(a.substr(0, a.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(a);
    }
  }
  std::reverse(args.begin(), args.end());
  return args;
}

// What CLI11 left over, refused as etcd 3.6 refuses it (Go's flag package
// for a flag it does not define; etcdmain for an argument after the flags).
Error refuse_extras(const std::vector<std::string>& rest) {
  if (rest.empty()) return {};
  const std::string& first = rest.front();
  if (first.size() > 1 && first[0] == '-') {
    size_t b = first.find_first_not_of('-');
    std::string name = b == std::string::npos ? "" : first.substr(b);
    name = name.substr(0, name.find('='));
    return {Code::kInvalidArgument, "flag provided but not defined: -" + name};
  }
  return {Code::kInvalidArgument, "\"" + first + "\" is not a valid flag"};
}

Error parse_args(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return {Code::kInvalidArgument, e.what()};
  }
  return {};
}

// Peer TLS (embed/etcd.go configurePeerListeners, embed/config.go
// PeerSelfCert, transport/listener.go baseConfig), in etcd's words.
// etcdq dials every member the same way (libraft names a member by
// host:port only), so the peer URLs are all http:// or all https://.
Error finish_peer_tls(Config* c, const Raw& r) {
  TransportSecurity& sec = c->peer_security;
  if (!r.peer_allowed_cn.empty()) sec.allowed_cn.push_back(r.peer_allowed_cn);
  if (!r.peer_allowed_hostname.empty()) sec.allowed_hostname.push_back(r.peer_allowed_hostname);
  if (!sec.allowed_cn.empty() && !sec.allowed_hostname.empty()) {
    return {Code::kInvalidArgument, "AllowedCN and AllowedHostname are mutually exclusive (cn=\"" + sec.allowed_cn[0] +
                                        "\", hostname=\"" + sec.allowed_hostname[0] + "\")"};
  }
  int https = 0, http = 0;
  auto count = [&](const Url& u) { ++(u.scheme == "https" ? https : http); };
  for (const auto* urls : {&c->listen_peer_urls, &c->initial_advertise_peer_urls}) {
    for (const auto& u : *urls) count(u);
  }
  std::vector<std::pair<std::string, Url>> initial;
  if (!c->initial_cluster.empty() && !parse_initial_cluster(c->initial_cluster, &initial)) {
    for (const auto& [name, u] : initial) count(u);
  }
  if (https > 0 && http > 0) {
    return {Code::kInvalidArgument,
            "peer URLs mix http:// and https:// (--listen-peer-urls, --initial-advertise-peer-urls, "
            "--initial-cluster): etcdq dials every member the same way, use https:// for all or none"};
  }
  bool certs = !sec.cert_file.empty() || !sec.key_file.empty();
  if (sec.auto_tls && certs) {
    c->warnings.push_back("ignoring peer auto TLS since certs given");
    sec.auto_tls = false;
  }
  if (https > 0 && !certs && !sec.auto_tls) {
    for (const auto& u : c->listen_peer_urls) {
      return {Code::kInvalidArgument, "cannot listen on TLS for " + u.host_port() +
                                          ": KeyFile and CertFile are not presented (--peer-cert-file, "
                                          "--peer-key-file, or --peer-auto-tls)"};
    }
  }
  if (https == 0 && (certs || sec.auto_tls)) {
    c->warnings.push_back("peer URLs are http://: ignoring --peer-cert-file, --peer-key-file and --peer-auto-tls");
  }
  return {};
}

// The TLS flags, in etcd's words (embed/etcd.go configureClientListeners,
// embed/config.go Validate and ClientSelfCert).
Error finish_tls(Config* c, const Raw& r) {
  TransportSecurity& sec = c->client_security;
  if (!sec.allowed_cn.empty() || !sec.allowed_hostname.empty()) {
    return {Code::kInvalidArgument, "client-transport-security: allowed-cn and allowed-hostname are not supported yet"};
  }
  if (Error e = finish_peer_tls(c, r)) return e;
  c->cipher_suites = split(r.cipher_suites, ',');
  if (Error e = net::validate_tls_settings(c->cipher_suites, c->tls_min_version, c->tls_max_version)) return e;
  bool certs = !sec.cert_file.empty() || !sec.key_file.empty();
  if (sec.auto_tls && certs) {
    c->warnings.push_back("ignoring client auto TLS since certs given");
    sec.auto_tls = false;
  }
  for (const auto* urls : {&c->listen_client_urls, &c->listen_client_http_urls}) {
    for (const auto& u : *urls) {
      if (u.scheme == "https" && !certs && !sec.auto_tls) {
        return {Code::kInvalidArgument, "TLS key/cert (--cert-file, --key-file) must be provided for client url " +
                                            u.text + " with HTTPS scheme"};
      }
    }
  }
  for (const auto& u : c->listen_metrics_urls) {
    if (u.scheme == "https" && !certs && !sec.auto_tls) {
      return {Code::kInvalidArgument,
              "client TLS key/cert (--cert-file, --key-file) must be provided for metrics secure url"};
    }
  }
  if (certs && !c->client_tls()) {
    c->warnings.push_back("scheme is HTTP while key and cert files are present; ignoring key and cert files");
  }
  return {};
}

// After parsing, from either source: the checks and defaults that need
// several flags, in etcd's words where etcd has them.
// etcd's decomposeOpts and jwtOptions.Parse (server/auth/store.go,
// options.go): "simple", or "jwt" then ",key=value" pairs, no key twice;
// unknown keys are ignored as etcd ignores them (it warns).
Error parse_auth_token(const std::string& flag, bool* jwt, auth::JwtOptions* out) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t comma = flag.find(',', start);
    parts.push_back(flag.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::map<std::string, std::string> opts;
  for (size_t i = 1; i < parts.size(); ++i) {
    size_t eq = parts[i].find('=');
    if (eq == std::string::npos || parts[i].find('=', eq + 1) != std::string::npos) {
      return auth::invalid_auth_opts("--auth-token: \"" + parts[i] + "\" is not key=value");
    }
    if (!opts.emplace(parts[i].substr(0, eq), parts[i].substr(eq + 1)).second) {
      return auth::invalid_auth_opts("--auth-token: " + parts[i].substr(0, eq) + " given twice");
    }
  }
  *jwt = false;
  if (parts[0] == "simple") return {};
  if (parts[0] != "jwt") return auth::invalid_auth_opts("--auth-token: unknown token type \"" + parts[0] + "\"");
  *jwt = true;
  out->sign_method = opts["sign-method"];
  out->pub_key = opts["pub-key"];
  out->priv_key = opts["priv-key"];
  if (!opts["ttl"].empty()) {
    int64_t ms = 0;
    if (Error e = parse_duration_ms(opts["ttl"], &ms); e || ms < 1000) {
      return auth::invalid_auth_opts("--auth-token: ttl=" + opts["ttl"] + " is not a duration of 1s or more");
    }
    out->ttl = std::chrono::seconds(ms / 1000);
  }
  return {};
}

// etcd 3.6's additions (etcdmain/config.go parse, embed/config.go
// Validate): a deprecated --experimental-* name or its new one (not both),
// feature gates, and the flags accepted only to be ignored, which end up
// in one warning for the log.
Error finish_etcd36(Config* c, const Raw& r) {
  // etcd 3.6 refuses an --experimental-* flag beside its new name
  // (embed.Config.Validate, experimentalFlagMigrationMap; the corruption
  // check's pairs go with their flags).
  static const std::pair<const char*, const char*> kMigrated[] = {
      {"experimental-compaction-batch-limit", "compaction-batch-limit"},
      {"experimental-watch-progress-notify-interval", "watch-progress-notify-interval"},
      {"experimental-warning-apply-duration", "warning-apply-duration"},
      {"experimental-bootstrap-defrag-threshold-megabytes", "bootstrap-defrag-threshold-megabytes"},
      {"experimental-memory-mlock", "memory-mlock"},
      {"experimental-snapshot-catchup-entries", "snapshot-catchup-entries"},
      {"experimental-compaction-sleep-interval", "compaction-sleep-interval"},
      {"experimental-downgrade-check-time", "downgrade-check-time"},
      {"experimental-peer-skip-client-san-verification", "peer-skip-client-san-verification"},
      {"experimental-enable-distributed-tracing", "enable-distributed-tracing"},
      {"experimental-distributed-tracing-address", "distributed-tracing-address"},
      {"experimental-distributed-tracing-service-name", "distributed-tracing-service-name"},
      {"experimental-distributed-tracing-instance-id", "distributed-tracing-instance-id"},
      {"experimental-distributed-tracing-sampling-rate", "distributed-tracing-sampling-rate"},
  };
  auto was_given = [&](const char* name) { return r.given.count(name) > 0 || c->ignored.count(name) > 0; };
  for (const auto& [old_name, new_name] : kMigrated) {
    if (was_given(old_name) && was_given(new_name)) {
      return {Code::kInvalidArgument, std::string("cannot set --") + old_name + " and --" + new_name +
                                          " at the same time, please use --" + new_name + " only"};
    }
  }
  bool experimental_progress = r.given.count("experimental-watch-progress-notify-interval") > 0;
  const char* progress_flag =
      experimental_progress ? "--experimental-watch-progress-notify-interval" : "--watch-progress-notify-interval";
  if (Error e = parse_duration_ms(experimental_progress ? r.progress : r.progress_new, &c->watch_progress_notify_ms)) {
    return {Code::kInvalidArgument, std::string(progress_flag) + ": " + e.message()};
  }
  c->snapshot_catchup_entries =
      r.given.count("experimental-snapshot-catchup-entries") > 0 ? r.catchup_experimental : r.catchup;
  if (!r.client_allowed_hostname.empty()) {
    return {Code::kInvalidArgument, "--client-cert-allowed-hostname is not supported yet (leave it empty)"};
  }
  if (Error e = c->feature_gates.set(r.feature_gates)) {
    return {Code::kInvalidArgument, "invalid value \"" + r.feature_gates + "\" for flag -feature-gates: " + e.message()};
  }
  std::map<std::string, bool> experimental;
  for (const auto& g : etcd_feature_gates()) {
    auto it = c->ignored.find(g.experimental_flag);
    if (*g.experimental_flag != '\0' && it != c->ignored.end()) {
      experimental[g.experimental_flag] = it->second == "1" || it->second[0] == 't' || it->second[0] == 'T';
    }
  }
  if (Error e = c->feature_gates.set_from_experimental(experimental, r.feature_gates)) return e;
  auto ignored = [c](const char* name) {
    auto it = c->ignored.find(name);
    return it == c->ignored.end() ? std::string() : it->second;
  };
  // Discovery that etcdq would ignore bootstraps another cluster than the
  // one asked for: refused. The empty defaults are fine.
  // (etcd takes --discovery-endpoints even when empty as a list of one.)
  for (const char* name : {"discovery", "discovery-srv", "discovery-endpoints"}) {
    if (!ignored(name).empty() || (c->ignored.count(name) > 0 && std::string(name) == "discovery-endpoints")) {
      return {Code::kInvalidArgument, std::string("--") + name +
                                          ": etcdq has no discovery; list the members in --initial-cluster instead"};
    }
  }
  if (std::string f = ignored("discovery-fallback"); !f.empty() && f != "exit") {
    if (f == "proxy") return {Code::kInvalidArgument, "v2 proxy is deprecated, and --discovery-fallback can't be configured as \"proxy\""};
    return {Code::kInvalidArgument, "invalid value \"" + f + "\" for flag -discovery-fallback: invalid value"};
  }
  for (const auto& v : split(ignored("v2-deprecation"), ',')) {
    if (v != "write-only" && v != "write-only-skip-check" && v != "write-only-drop-data" && v != "gone") {
      return {Code::kInvalidArgument, "invalid value \"" + ignored("v2-deprecation") +
                                          "\" for flag -v2-deprecation: invalid value \"" + v + "\""};
    }
  }
  auto nonzero = [](const std::string& d) { return !d.empty() && d.find_first_not_of("+-0.nsuµμmh") != std::string::npos; };
  if (nonzero(ignored("experimental-warning-unary-request-duration")) &&
      nonzero(ignored("warning-unary-request-duration"))) {
    return {Code::kInvalidArgument,
            "both --experimental-warning-unary-request-duration and --warning-unary-request-duration flags are set. "
            "Use only --warning-unary-request-duration"};
  }
  std::string line = ignored_flags_log_line(c->ignored);
  for (const auto& g : etcd_feature_gates()) {
    bool on = c->feature_gates.enabled(g.name);
    auto set = c->feature_gates.explicitly_set();
    bool given = std::find(set.begin(), set.end(), std::string(g.name) + (on ? "=true" : "=false")) != set.end();
    if (!given && on == g.default_value) continue;
    line += std::string(line.empty() ? "" : "; ") + "--feature-gates " + g.name + "=" + (on ? "true" : "false") +
            " (" + g.in_etcdq + ")";
  }
  if (!line.empty()) c->warnings.push_back("etcd flags that change nothing in etcdq, accepted and ignored: " + line);
  return {};
}

// etcd 3.6 (etcdmain/config.go, embed/config.go Validate): the
// deprecated flag takes over when given, with a warning; both is an error.
Error finish_corrupt_check(Config* c, const Raw& r) {
  const std::string& old_flag = r.experimental_corrupt_check_time;
  if (!old_flag.empty() && !r.corrupt_check_time.empty()) {
    return {Code::kInvalidArgument,
            "cannot set --experimental-corrupt-check-time and --corrupt-check-time at the same time, please use "
            "--corrupt-check-time only"};
  }
  if (!old_flag.empty()) {
    c->warnings.push_back("--experimental-corrupt-check-time is deprecated in v3.6 and will be decommissioned in "
                          "v3.7. Use '--corrupt-check-time' instead.");
  }
  // 3.6's gate, beside the flag it replaces. (etcd 3.6 refuses the two
  // given together; etcdq takes either and does not refuse that yet.)
  if (c->feature_gates.enabled("InitialCorruptCheck")) c->initial_corrupt_check = true;
  const std::string& text = old_flag.empty() ? r.corrupt_check_time : old_flag;
  if (text.empty()) return {};
  if (Error e = member::parse_go_duration_ms(text, &c->corrupt_check_ms)) {
    return {Code::kInvalidArgument,
            std::string(old_flag.empty() ? "--corrupt-check-time" : "--experimental-corrupt-check-time") + ": " +
                e.message()};
  }
  // etcd 3.6 cannot start with a negative interval (its ticker panics); a
  // silently disabled check would be worse than a refusal.
  if (c->corrupt_check_ms < 0) {
    return {Code::kInvalidArgument,
            std::string(old_flag.empty() ? "--corrupt-check-time" : "--experimental-corrupt-check-time") +
                ": must not be negative (" + text + ")"};
  }
  return {};
}

Error finish(Config* c, const Raw& r) {
  std::string listen_client = r.listen_client, advertise_client = r.advertise_client, listen_peer = r.listen_peer,
              advertise_peer = r.advertise_peer;
  const std::string &listen_http = r.listen_http, &listen_metrics = r.listen_metrics;
  // On the command line etcd 3.6's --initial-cluster-state is a Go flag
  // value that takes only "new" or "existing" (etcdmain/config.go,
  // flags.NewSelectiveStringValue), so Go's flag package refuses any other
  // before every other check, exit status 2; from a config file the value
  // reaches embed's Validate ("unexpected clusterState", below).
  if (c->config_file.empty() && c->initial_cluster_state != "new" && c->initial_cluster_state != "existing") {
    return {Code::kInvalidArgument,
            "invalid value \"" + c->initial_cluster_state + "\" for flag -initial-cluster-state: invalid value"};
  }
  if (Error e = finish_etcd36(c, r)) return e;
  if (c->data_dir.empty()) c->data_dir = c->name + ".etcdq";
  if (advertise_client.empty()) advertise_client = listen_client;
  if (advertise_peer.empty()) advertise_peer = listen_peer;
  if (Error e = parse_urls("listen-client-urls", listen_client, &c->listen_client_urls)) return e;
  if (Error e = parse_urls("advertise-client-urls", advertise_client, &c->advertise_client_urls)) return e;
  if (Error e = parse_urls("listen-peer-urls", listen_peer, &c->listen_peer_urls)) return e;
  if (Error e = parse_urls("initial-advertise-peer-urls", advertise_peer, &c->initial_advertise_peer_urls)) return e;
  if (!listen_http.empty()) {
    if (Error e = parse_urls("listen-client-http-urls", listen_http, &c->listen_client_http_urls)) return e;
  }
  if (!listen_metrics.empty()) {
    if (Error e = parse_urls("listen-metrics-urls", listen_metrics, &c->listen_metrics_urls)) return e;
  }
  // One listener an address: a second would fail to bind, or (with
  // SO_REUSEPORT) silently take half of the connections.
  std::vector<std::pair<std::string, const Url*>> bound;
  auto add = [&bound](const char* flag, const std::vector<Url>& urls) -> Error {
    for (const auto& u : urls) {
      for (const auto& [other, v] : bound) {
        if (v->host_port() == u.host_port()) {
          return {Code::kInvalidArgument, std::string("--") + flag + " " + u.text + " is also in --" + other +
                                              ": each address takes one listener (the client URLs serve gRPC and "
                                              "HTTP together already)"};
        }
      }
      bound.emplace_back(flag, &u);
    }
    return {};
  };
  if (Error e = add("listen-client-urls", c->listen_client_urls)) return e;
  if (Error e = add("listen-peer-urls", c->listen_peer_urls)) return e;
  if (Error e = add("listen-client-http-urls", c->listen_client_http_urls)) return e;
  if (Error e = add("listen-metrics-urls", c->listen_metrics_urls)) return e;
  if (!c->clickhouse_url.empty()) {
    Url u;
    if (Error e = parse_url(c->clickhouse_url, &u)) return {Code::kInvalidArgument, "--clickhouse-url: " + e.message()};
    std::string after = c->clickhouse_url.substr(c->clickhouse_url.find("://") + 3);
    size_t slash = after.find('/');
    if (slash != std::string::npos && after.substr(slash) != "/") {
      return {Code::kInvalidArgument, "--clickhouse-url " + c->clickhouse_url +
                                          ": give ClickHouse's HTTP interface as http://host:port (no path)"};
    }
    c->clickhouse_url = "http://" + u.host_port();
  }
  if (c->initial_cluster.empty()) {
    for (const auto& u : c->initial_advertise_peer_urls) {
      if (!c->initial_cluster.empty()) c->initial_cluster += ",";
      c->initial_cluster += c->name + "=" + u.text;
    }
  }
  // etcd 3.4's checks and messages (embed/config.go Validate, embed/etcd.go
  // parseCompactionRetention, embed/config_logging.go).
  if (Error e = parse_auth_token(c->auth_token, &c->jwt, &c->jwt_options)) return e;
  if (c->initial_cluster_state != "new" && c->initial_cluster_state != "existing") {
    return {Code::kInvalidArgument, "unexpected clusterState \"" + c->initial_cluster_state + "\""};
  }
  if (r.auto_compaction_mode == "periodic") {
    c->auto_compaction_mode = member::CompactionMode::kPeriodic;
  } else if (r.auto_compaction_mode == "revision") {
    c->auto_compaction_mode = member::CompactionMode::kRevision;
  } else {
    return {Code::kInvalidArgument, "unknown auto-compaction-mode \"" + r.auto_compaction_mode + "\""};
  }
  if (Error e = member::parse_compaction_retention(c->auto_compaction_mode, r.auto_compaction_retention,
                                                   &c->auto_compaction_retention)) {
    return {Code::kInvalidArgument, "--auto-compaction-retention: " + e.message()};
  }
  c->log_outputs.clear();
  for (const auto& o : split(r.log_outputs, ',')) {
    if (std::find(c->log_outputs.begin(), c->log_outputs.end(), o) == c->log_outputs.end()) c->log_outputs.push_back(o);
  }
  if (c->log_outputs.empty()) c->log_outputs = {"default"};
  // etcd 3.6's setupLogging (embed/config_logging.go); 3.4 still took capnslog.
  if (c->logger == "capnslog") return {Code::kInvalidArgument, "--logger=capnslog is removed in v3.5"};
  if (c->logger != "zap") return {Code::kInvalidArgument, "unknown logger option \"" + c->logger + "\""};
  if (c->log_outputs.size() > 1 &&
      std::find(c->log_outputs.begin(), c->log_outputs.end(), "default") != c->log_outputs.end()) {
    return {Code::kInvalidArgument, "multi logoutput for \"default\" is not supported yet"};
  }
  if (Error e = finish_tls(c, r)) return e;
  if (Error e = finish_corrupt_check(c, r)) return e;
  return {};
}

}  // namespace

bool Config::peer_tls() const {
  for (const auto& u : listen_peer_urls) {
    if (u.scheme == "https") return true;
  }
  return false;
}

bool Config::client_tls() const {
  for (const auto* urls : {&listen_client_urls, &listen_client_http_urls, &listen_metrics_urls}) {
    for (const auto& u : *urls) {
      if (u.scheme == "https") return true;
    }
  }
  return false;
}

Error parse_flags(int argc, char** argv, Config* c, bool* exit_now) {
  *exit_now = false;
  // Named here: parse() of a vector (go_style_args) does not take argv[0].
  CLI::App app{"etcdq: a key-value store that speaks the etcd v3 API", "etcdq"};
  Raw raw;
  define(app, c, &raw, /*with_env=*/true);
  app.add_option("--config-file", c->config_file,
                 "etcd's YAML config file; when given, the other flags and ETCD_* variables are ignored")
      ->envname("ETCD_CONFIG_FILE");
  app.add_flag("--version", c->print_version, "Print the version and exit");
  app.footer("Offline: etcdq snapshot restore <filename> [flags] (etcdq snapshot restore --help)");
  // Unknown arguments are kept to be refused in etcd's words below.
  app.allow_extras();
  try {
    app.parse(go_style_args(argc, argv));
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    *exit_now = true;
    return {};
  } catch (const CLI::ParseError& e) {
    return {Code::kInvalidArgument, e.what()};
  }
  if (Error e = refuse_extras(app.remaining())) return e;
  if (c->print_version) {
    *exit_now = true;
    return {};
  }
  if (c->config_file.empty()) {
    if (Error e = note_given(app, &raw, c)) return e;
    return finish(c, raw);
  }

  const std::string path = c->config_file;
  ConfigFile file;
  if (Error e = read_config_file(path, &file)) return e;
  *c = Config{};
  c->config_file = path;
  Raw file_raw;
  CLI::App file_app;
  define(file_app, c, &file_raw, /*with_env=*/false);
  std::vector<std::string> args;
  for (const auto& [key, value] : file.values) {
    if (file_app.get_option_no_throw("--" + key) == nullptr) {
      file.ignored.push_back(key);
      continue;
    }
    args.push_back("--" + key + "=" + value);
  }
  if (Error e = parse_args(file_app, args)) return {Code::kInvalidArgument, "config file " + path + ": " + e.message()};
  if (Error e = note_given(file_app, &file_raw, c)) {
    return {Code::kInvalidArgument, "config file " + path + ": " + e.message()};
  }
  c->client_security = file.client_security;
  c->peer_security = file.peer_security;
  c->client_crl_file.clear();  // not keys of etcd's config file
  c->peer_crl_file.clear();
  c->notes.push_back("loaded server configuration from " + path +
                     ", other configuration command line flags and environment variables will be ignored if provided");
  if (!file.ignored.empty()) {
    std::string keys;
    for (const auto& k : file.ignored) keys += (keys.empty() ? "" : ", ") + k;
    c->warnings.push_back("config file " + path + ": keys etcdq does not use, ignored as etcd ignores unknown keys: " +
                          keys);
  }
  return finish(c, file_raw);
}

}  // namespace etcdq::cli
