// What a Host (host/host.h) is started with: etcd's embed.Config, reduced to
// what etcdq serves. The command line (cli/flags.h) fills it; nothing here
// reads a flag, a file or the environment.
//
// The member's own settings (data dir, cluster, limits, Raft timings, ...)
// are member::Options; the rest says where the member is reached and how:
// the URLs to listen on and their TLS.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "auth/jwt_tokens.h"
#include "member/member.h"
#include "net/tls_context.h"

namespace etcdq::host {

// A URL to listen on, as given: "http" or "https" (net/tls_pump.h), the
// host as an address (cli::parse_url resolves "localhost"), and the port.
struct Url {
  std::string scheme;
  std::string host;
  int port = 0;
  std::string text;  // as given
  std::string host_port() const { return host + ":" + std::to_string(port); }
};

// One kind of URL's TLS (etcd's ClientTLSInfo or PeerTLSInfo with
// --auto-tls / --peer-auto-tls). Used only when a URL of that kind is
// https:// (client: a client, client HTTP or metrics URL; peer: the peer
// URLs, all or none).
struct Tls {
  // Files, verification, CRL, cipher suites and versions (flag_prefix ""
  // for the client flags, "peer-" for the peer ones).
  net::TlsOptions options;
  // A self-signed certificate in <data-dir>/fixtures/{client,peer} for the
  // listen URLs' hosts (etcd's ClientSelfCert / PeerSelfCert).
  bool auto_tls = false;
};

struct Config {
  // Name, data dir, limits, timings, ...: everything but initial_cluster
  // and jwt, which start() fills from the two below.
  member::Options member;
  // --initial-cluster (name, peer URL), in order, and this member's
  // --initial-advertise-peer-urls (host/bootstrap_check.h).
  std::vector<std::pair<std::string, Url>> initial_cluster;
  std::vector<Url> initial_advertise_peer_urls;
  // --auth-token jwt,...: its keys are loaded before the member opens, as
  // etcd refuses to start on a bad one. None: simple tokens.
  std::optional<auth::JwtOptions> jwt;
  // Each serves etcd's protocols on one port (net/mux.h): the client URLs
  // gRPC and HTTP/1.1 (only gRPC when listen_client_http_urls is set), the
  // client HTTP URLs the gateway, /metrics and /health, the metrics URLs
  // /metrics and /health only, the peer URLs member-only traffic.
  std::vector<Url> listen_client_urls;
  std::vector<Url> listen_client_http_urls;
  std::vector<Url> listen_metrics_urls;
  std::vector<Url> listen_peer_urls;
  Tls client_tls;
  Tls peer_tls;
  // --watch-progress-notify-interval (server/watch_service.h).
  int64_t watch_progress_notify_ms = 600000;
  // --experimental-initial-corrupt-check (member/corruption_check.h).
  bool initial_corrupt_check = false;

  // Whether any client, client HTTP or metrics URL is https:// (then
  // client_tls is loaded), and whether the peer URLs are.
  bool client_tls_wanted() const;
  bool peer_tls_wanted() const;
};

}  // namespace etcdq::host
