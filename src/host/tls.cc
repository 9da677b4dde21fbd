#include "host/tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace etcdq::host {

Error open_client_tls(const Config& cfg, std::shared_ptr<net::TlsContext>* out) {
  net::TlsOptions o = cfg.client_tls.options;
  // etcd 3.6 serves client TLS through Go's HTTP/2 server, which refuses a
  // TLS 1.2 cipher-suite list without an AES-128-GCM one (http2's
  // ConfigureServer; a TLS 1.3-only list is refused before this).
  if (!o.cipher_suites.empty() &&
      std::none_of(o.cipher_suites.begin(), o.cipher_suites.end(), [](const std::string& s) {
        return s == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" || s == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256";
      })) {
    return {Code::kInvalidArgument,
            "http2: TLSConfig.CipherSuites is missing an HTTP/2-required AES_128_GCM_SHA256 cipher (need at least "
            "one of TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)"};
  }
  if (cfg.client_tls.auto_tls) {
    std::vector<std::string> hosts;
    for (const auto& u : cfg.listen_client_urls) hosts.push_back(u.host);
    std::string dir = (std::filesystem::path(cfg.member.data_dir) / "fixtures" / "client").string();
    if (Error e = net::self_signed_cert(dir, hosts, &o.cert_file, &o.key_file)) return e;
  }
  return net::TlsContext::open(std::move(o), out);
}

Error open_peer_tls(const Config& cfg, std::shared_ptr<net::TlsContext>* out) {
  net::TlsOptions o = cfg.peer_tls.options;
  o.dial = true;
  if (cfg.peer_tls.auto_tls) {
    std::vector<std::string> hosts;
    for (const auto& u : cfg.listen_peer_urls) hosts.push_back(u.host);
    std::string dir = (std::filesystem::path(cfg.member.data_dir) / "fixtures" / "peer").string();
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

}  // namespace etcdq::host
