// The etcdq command line: etcd's flag names and defaults, so existing
// scripts and unit files work (DESIGN.md, "Server flags"). Every flag can
// also come from the matching ETCD_* environment variable, as with etcd, or
// from etcd's YAML --config-file (cli/config_file.h), which then is the only
// source: like etcd (etcdmain/config.go), the other flags and the ETCD_*
// variables are ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/config_file.h"
#include "cli/feature_gates.h"
#include "cli/ignored_flags.h"
#include "auth/jwt_tokens.h"
#include "common/error.h"
#include "host/config.h"
#include "member/auto_compaction.h"

namespace etcdq::cli {

// URLs parse into the host's type (host/config.h): the flags fill its config.
using Url = host::Url;

struct Config {
  std::string name = "default";
  std::string data_dir;  // default: <name>.etcdq
  std::vector<Url> listen_client_urls;
  std::vector<Url> advertise_client_urls;
  std::vector<Url> listen_peer_urls;
  std::vector<Url> initial_advertise_peer_urls;
  // HTTP: /metrics, /health, /version (http/server.h); etcd 3.5's flags.
  std::vector<Url> listen_client_http_urls;
  std::vector<Url> listen_metrics_urls;
  // The ClickHouse sink of `ch:{table}` queues (queue/clickhouse.h).
  std::string clickhouse_url;
  std::string clickhouse_db = "default";
  std::string initial_cluster;  // name=url,...
  std::string initial_cluster_state = "new";
  std::string initial_cluster_token = "etcd-cluster";
  int64_t max_request_bytes = 1572864;
  int64_t max_txn_ops = 128;
  int64_t quota_backend_bytes = 0;  // 0: etcd's default (2 GiB); < 0: no quota
  std::string auth_token = "simple";  // --auth-token: "simple" or "jwt,<options>"
  bool jwt = false;                   // --auth-token jwt,...: its options in jwt_options
  auth::JwtOptions jwt_options;
  int64_t auth_token_ttl = 300;       // --auth-token-ttl, seconds
  int bcrypt_cost = 10;               // --bcrypt-cost, 4..31
  uint64_t snapshot_count = 8192;  // requests applied between Raft snapshots
  bool strict_reconfig_check = true;
  bool pre_vote = true;
  unsigned heartbeat_ms = 100;
  unsigned election_ms = 1000;
  std::string config_file;  // --config-file / ETCD_CONFIG_FILE
  // --auto-compaction-mode / -retention, parsed as etcd 3.4 does
  // (member/auto_compaction.h); a retention of 0: off (etcd's default).
  member::CompactionMode auto_compaction_mode = member::CompactionMode::kPeriodic;
  int64_t auto_compaction_retention = 0;  // ms (periodic) or revisions
  // Logging as etcd's --logger, --log-outputs, --log-level: etcd's zap JSON
  // lines; capnslog is refused, as etcd 3.6 refuses it. Outputs: "default"
  // (stderr), "stderr", "stdout", "journal" (stderr: systemd's journal
  // reads it), or a file path.
  std::string logger = "zap";
  std::vector<std::string> log_outputs = {"default"};
  std::string log_level = "info";
  // Client TLS, etcd's flags: --cert-file, --key-file, --trusted-ca-file,
  // --client-cert-auth, --auto-tls (or the config file's
  // client-transport-security block), --client-crl-file, --cipher-suites,
  // --tls-min-version, --tls-max-version (net/tls_context.h). Peer TLS:
  // --peer-cert-file, --peer-key-file, --peer-trusted-ca-file,
  // --peer-client-cert-auth, --peer-auto-tls, --peer-cert-allowed-cn,
  // --peer-cert-allowed-hostname (or the peer-transport-security block),
  // --peer-crl-file (host/tls.h).
  TransportSecurity client_security;
  TransportSecurity peer_security;
  std::string client_crl_file;
  std::string peer_crl_file;
  std::vector<std::string> cipher_suites;  // Go's names
  std::string tls_min_version = "TLS1.2";
  std::string tls_max_version;  // "": the highest
  bool client_tls() const;  // an https:// URL serves clients (or HTTP/metrics)
  bool peer_tls() const;    // the peer URLs are https:// (then all are)
  // Notes and warnings for the log once it is set up (which the flags pick).
  std::vector<std::string> notes;
  std::vector<std::string> warnings;
  // --watch-progress-notify-interval (3.6's name) or
  // --experimental-watch-progress-notify-interval (not both, as in etcd 3.6).
  int64_t watch_progress_notify_ms = 600000;  // etcd's default: 10 minutes
  // Corruption checks (member/corruption_check.h), etcd 3.6's flags:
  // --experimental-initial-corrupt-check (the InitialCorruptCheck feature
  // gate), --corrupt-check-time or the deprecated
  // --experimental-corrupt-check-time (0: off).
  bool initial_corrupt_check = false;
  int64_t corrupt_check_ms = 0;
  bool print_version = false;
  // --wal-dir: the Raft log's directory instead of <data-dir>/member/raft
  // (member/raft_log_dir.h). "": the default.
  std::string wal_dir;
  // --force-new-cluster: restart this member's data as a one-member
  // cluster (consensus/node.h, NodeOptions::force_new_cluster).
  bool force_new_cluster = false;
  // --max-learners: learners the cluster may hold (etcd's default 1).
  int max_learners = 1;
  // --snapshot-catchup-entries (or --experimental-...): requests kept in
  // the log behind a snapshot for followers that lag; 0: the default (5000,
  // or --snapshot-count if smaller).
  uint64_t snapshot_catchup_entries = 0;
  // --feature-gates and the --experimental-* flags 3.6 maps to gates.
  FeatureGates feature_gates;
  // The etcd 3.6 flags given that etcdq does not act on (cli/ignored_flags.h).
  IgnoredValues ignored;
};

// Parses argv. Returns an error for bad flags or URLs (message says which);
// sets *exit_now for --help/--version after printing. A flag etcd 3.6 does
// not define fails in Go's words ("flag provided but not defined: -bogus"),
// an argument that is not a flag as etcd's ("\"x\" is not a valid flag").
Error parse_flags(int argc, char** argv, Config* out, bool* exit_now);

// "a=http://h:p,b=..." -> (name, url) pairs, in order.
Error parse_initial_cluster(const std::string& s, std::vector<std::pair<std::string, Url>>* out);
Error parse_url(const std::string& s, Url* out);
// Go-style durations as etcd takes them: "10m", "5s", "250ms", "1h".
Error parse_duration_ms(const std::string& s, int64_t* ms);

}  // namespace etcdq::cli
