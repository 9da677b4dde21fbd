#include "cli/host_config.h"

namespace etcdq::cli {
namespace {

host::Tls client_tls(const Config& cfg) {
  host::Tls t;
  net::TlsOptions& o = t.options;
  o.cert_file = cfg.client_security.cert_file;
  o.key_file = cfg.client_security.key_file;
  o.trusted_ca_file = cfg.client_security.trusted_ca_file;
  o.client_cert_auth = cfg.client_security.client_cert_auth;
  o.crl_file = cfg.client_crl_file;
  o.cipher_suites = cfg.cipher_suites;
  o.min_version = cfg.tls_min_version;
  o.max_version = cfg.tls_max_version;
  t.auto_tls = cfg.client_security.auto_tls;
  return t;
}

host::Tls peer_tls(const Config& cfg) {
  const TransportSecurity& sec = cfg.peer_security;
  host::Tls t;
  net::TlsOptions& o = t.options;
  o.flag_prefix = "peer-";
  o.cert_file = sec.cert_file;
  o.key_file = sec.key_file;
  o.trusted_ca_file = sec.trusted_ca_file;
  o.client_cert_auth = sec.client_cert_auth;
  o.crl_file = cfg.peer_crl_file;
  // etcd applies --cipher-suites and the TLS versions to both kinds of URL.
  o.cipher_suites = cfg.cipher_suites;
  o.min_version = cfg.tls_min_version;
  o.max_version = cfg.tls_max_version;
  o.allowed_cn = sec.allowed_cn;
  o.allowed_hostname = sec.allowed_hostname;
  t.auto_tls = sec.auto_tls;
  return t;
}

}  // namespace

Error host_config(const Config& cfg, host::Config* out) {
  if (Error e = parse_initial_cluster(cfg.initial_cluster, &out->initial_cluster)) return e;
  out->initial_advertise_peer_urls = cfg.initial_advertise_peer_urls;
  if (cfg.jwt) out->jwt = cfg.jwt_options;
  member::Options& mo = out->member;
  mo.name = cfg.name;
  mo.data_dir = cfg.data_dir;
  mo.join = cfg.initial_cluster_state == "existing";
  mo.cluster_token = cfg.initial_cluster_token;
  for (const auto& u : cfg.advertise_client_urls) mo.advertise_client_urls.push_back(u.text);
  mo.limits.max_request_bytes = cfg.max_request_bytes;
  mo.limits.max_txn_ops = cfg.max_txn_ops;
  mo.limits.bcrypt_cost = cfg.bcrypt_cost;
  mo.auth_token_ttl_seconds = cfg.auth_token_ttl;
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

  out->listen_client_urls = cfg.listen_client_urls;
  out->listen_client_http_urls = cfg.listen_client_http_urls;
  out->listen_metrics_urls = cfg.listen_metrics_urls;
  out->listen_peer_urls = cfg.listen_peer_urls;
  out->client_tls = client_tls(cfg);
  out->peer_tls = peer_tls(cfg);
  out->watch_progress_notify_ms = cfg.watch_progress_notify_ms;
  out->initial_corrupt_check = cfg.initial_corrupt_check;
  return {};
}

}  // namespace etcdq::cli
