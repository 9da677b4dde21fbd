#include "cli/peer_tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <filesystem>

namespace etcdq::cli {

Error open_peer_tls(const Config& cfg, std::shared_ptr<net::TlsContext>* out) {
  const TransportSecurity& sec = cfg.peer_security;
  net::TlsOptions o;
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
  o.dial = true;
  if (sec.auto_tls) {
    std::vector<std::string> hosts;
    for (const auto& u : cfg.listen_peer_urls) hosts.push_back(u.host);
    std::string dir = (std::filesystem::path(cfg.data_dir) / "fixtures" / "peer").string();
    if (Error e = net::self_signed_cert(dir, hosts, &o.cert_file, &o.key_file)) {
      return {e.code(), "--peer-auto-tls: " + e.message()};
    }
    o.skip_verify = true;
  }
  return net::TlsContext::open(std::move(o), out);
}

std::shared_ptr<grpc::ChannelCredentials> peer_channel_credentials(const net::TlsOptions& o) {
  using namespace grpc::experimental;
  std::shared_ptr<CertificateProviderInterface> provider;
  if (o.trusted_ca_file.empty()) {
    provider = std::make_shared<FileWatcherCertificateProvider>(o.key_file, o.cert_file,
                                                                kPeerCredentialsRefreshSeconds);
  } else {
    provider = std::make_shared<FileWatcherCertificateProvider>(o.key_file, o.cert_file, o.trusted_ca_file,
                                                                kPeerCredentialsRefreshSeconds);
  }
  TlsChannelCredentialsOptions opts;
  opts.set_certificate_provider(provider);
  opts.watch_identity_key_cert_pairs();
  if (!o.trusted_ca_file.empty()) opts.watch_root_certs();
  if (o.skip_verify) {
    opts.set_verify_server_certs(false);
    opts.set_check_call_host(false);
    opts.set_certificate_verifier(std::make_shared<NoOpCertificateVerifier>());
  }
  return TlsCredentials(opts);
}

}  // namespace etcdq::cli
