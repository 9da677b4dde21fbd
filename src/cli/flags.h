// The etcdq command line: etcd's flag names and defaults, so existing
// scripts and unit files work (DESIGN.md, "Server flags"). Every flag can
// also come from the matching ETCD_* environment variable, as with etcd.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace etcdq::cli {

struct Url {
  std::string scheme;  // "http" (https: TLS is not supported yet)
  std::string host;
  int port = 0;
  std::string text;  // as given
  std::string host_port() const { return host + ":" + std::to_string(port); }
};

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
  uint64_t snapshot_count = 8192;  // Raft log entries between snapshots
  bool strict_reconfig_check = true;
  bool pre_vote = true;
  unsigned heartbeat_ms = 100;
  unsigned election_ms = 1000;
  std::string log_level = "info";
  int64_t watch_progress_notify_ms = 600000;  // etcd's default: 10 minutes
  bool print_version = false;
};

// Parses argv. Returns an error for bad flags or URLs (message says which);
// sets *exit_now for --help/--version after printing.
Error parse_flags(int argc, char** argv, Config* out, bool* exit_now);

// "a=http://h:p,b=..." -> (name, url) pairs, in order.
Error parse_initial_cluster(const std::string& s, std::vector<std::pair<std::string, Url>>* out);
Error parse_url(const std::string& s, Url* out);
// Go-style durations as etcd takes them: "10m", "5s", "250ms", "1h".
Error parse_duration_ms(const std::string& s, int64_t* ms);

}  // namespace etcdq::cli
