// The TLS settings of one kind of URL (the client URLs, or the peer URLs:
// the same options under etcd's --peer-* flag names) turned into an OpenSSL
// SSL_CTX, re-read when the files change on disk. The peer settings also
// give a client context: members dial each other with the same key pair
// (etcd's TLSInfo.ClientConfig, used by rafthttp).
//
// etcd builds a Go tls.Config from its flags (client/pkg/transport/
// listener.go, TLSInfo.ServerConfig) and this mirrors it:
//   - cert-file/key-file: the server's chain and key (PEM), checked to match
//     at start ("tls: private key does not match public key", as Go says);
//   - trusted-ca-file or client-cert-auth: the client must present a
//     certificate that verifies (RequireAndVerifyClientCert); against
//     trusted-ca-file, else the system's roots;
//   - crl-file: a verified client whose certificate, or any CA certificate
//     of its chain (an intermediate it presents or one of the trusted
//     file), a CRL (PEM or DER) of its issuer lists is refused (etcd's
//     checkCRL checks every certificate presented); a certificate from a
//     CA the CRL does not cover passes, as in etcd. The peer settings'
//     client context checks the member it dials the same way (etcd 3.6
//     checks only who connects to its peer listener);
//   - cipher-suites: Go's names (tlsutil.GetCipherSuite, IANA names plus
//     Go's two CHACHA20 aliases); an unknown one is refused with etcd's
//     "unexpected TLS cipher suite %q". They restrict TLS 1.2; TLS 1.3's
//     suites are not configurable, as in Go (names of TLS 1.3 suites are
//     accepted and change nothing);
//   - min/max version: "TLS1.2", "TLS1.3" (max "" = the highest), etcd's
//     "unexpected TLS version %q (must be one of: TLS1.2, TLS1.3)".
//   - allowed-cn / allowed-hostname (peer): the other side's verified
//     certificate must have one of these subject CNs, or be valid for one
//     of these host names or IPs (SANs only, as Go's VerifyHostname), else
//     the connection is refused with etcd's "client certificate
//     authentication failed" (listener.go baseConfig's
//     VerifyPeerCertificate, which etcd applies to both directions).
// Client context (dial): the same chain and key, the trusted CA as roots
// (else the system's), and the server's certificate must match the host
// dialed; with skip_verify (--peer-auto-tls, self-signed) it is not
// verified at all, as etcd sets InsecureSkipVerify.
// ALPN: "http/1.1" when the client offers it (curl offers h2 and http/1.1,
// and its /health must come over HTTP/1.1), else "h2" (gRPC offers only
// h2), else none; the plaintext is routed by its first bytes anyway
// (net/tls_pump.h).
//
// Reload: etcd reads the cert and key on every handshake (GetCertificate),
// so rotating the files needs no restart. Here current() looks at the
// files' mtime, size and inode at most once a second and, when one changed,
// builds a new SSL_CTX from all of them; a new file that does not load
// (half-written, key not matching) keeps the old context and logs an error
// naming the flag and file, once per change. Connections keep the context
// they started with.
//
// Thread-safety: open() from one thread; current() from any.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace etcdq::net {

struct TlsOptions {
  // Flag names in errors: "" for the client flags (--cert-file), "peer-" for
  // the peer ones (--peer-cert-file); the CRL flag is --client-crl-file or
  // --peer-crl-file.
  std::string flag_prefix;
  std::string cert_file;
  std::string key_file;
  std::string trusted_ca_file;
  std::string crl_file;
  bool client_cert_auth = false;
  std::vector<std::string> cipher_suites;  // Go's names; empty: OpenSSL's defaults
  std::string min_version = "TLS1.2";
  std::string max_version;  // "": the highest OpenSSL has (TLS 1.3)
  std::vector<std::string> allowed_cn;        // empty: any CN
  std::vector<std::string> allowed_hostname;  // empty: any host
  bool dial = false;         // also build the client context (current_client)
  bool skip_verify = false;  // client context: do not verify the server (auto TLS)
};

// Checks what can be checked without files: cipher suite names and the
// versions, in etcd's words (embed/config.go Validate).
Error validate_tls_settings(const std::vector<std::string>& cipher_suites, const std::string& min_version,
                            const std::string& max_version);

class TlsContext {
 public:
  // Loads every file and builds the first context. Errors (InvalidArgument)
  // name the flag and the file: "--key-file /x/key.pem: open /x/key.pem:
  // no such file or directory", "...: tls: private key does not match
  // public key", a CA/CRL file with no certificate/CRL in it, ...
  static Error open(TlsOptions options, std::shared_ptr<TlsContext>* out);
  ~TlsContext();

  // The context for a new connection (never null): the newest that loaded.
  // Holds a reference the caller drops with SSL_CTX_free (SSL_new takes its
  // own, so free right after SSL_new).
  SSL_CTX* current();
  // The same for connections this process dials (TLS_client_method): null
  // unless options().dial.
  SSL_CTX* current_client();
  const TlsOptions& options() const { return options_; }

  // After a handshake, either side: "" when the other side's certificate
  // passes allowed-cn / allowed-hostname (always, when neither is set),
  // else why not (etcd's words). Any thread.
  std::string check_identity(const SSL* ssl) const;

  static constexpr std::chrono::seconds kCheckEvery{1};

 private:
  explicit TlsContext(TlsOptions options) : options_(std::move(options)) {}
  Error build(SSL_CTX** out, SSL_CTX** client) const;
  void refresh();  // mu_ held: rebuild when the files changed
  std::vector<std::string> stamp() const;  // each file's (mtime, size, inode)

  const TlsOptions options_;
  std::mutex mu_;  // guards everything below
  SSL_CTX* ctx_ = nullptr;
  SSL_CTX* client_ctx_ = nullptr;  // options_.dial only
  std::vector<std::string> stamp_;         // of the files ctx_ was built from
  std::vector<std::string> failed_stamp_;  // the last change that did not load (logged once)
  std::chrono::steady_clock::time_point next_check_{};
};

// etcd's --auto-tls (transport.SelfCert): a self-signed certificate for
// `hosts` (IP addresses become IP SANs, other names DNS SANs), ECDSA P-521,
// Organization "etcd", CA:TRUE, server auth, valid one year, written to
// <dir>/cert.pem and <dir>/key.pem (0600). When both files exist they are
// reused, as etcd does. Errors name the file.
Error self_signed_cert(const std::string& dir, const std::vector<std::string>& hosts, std::string* cert_file,
                       std::string* key_file);

}  // namespace etcdq::net
