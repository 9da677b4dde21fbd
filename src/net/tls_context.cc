#include "net/tls_context.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace etcdq::net {
namespace {

// Go's cipher suite names (crypto/tls CipherSuites and InsecureCipherSuites,
// plus the two aliases etcd's tlsutil adds) -> OpenSSL's names. "" marks a
// TLS 1.3 suite: accepted, and not configurable (as in Go).
const std::map<std::string, std::string>& go_cipher_suites() {
  static const std::map<std::string, std::string> m = {
      {"TLS_AES_128_GCM_SHA256", ""},
      {"TLS_AES_256_GCM_SHA384", ""},
      {"TLS_CHACHA20_POLY1305_SHA256", ""},
      {"TLS_RSA_WITH_RC4_128_SHA", "RC4-SHA"},
      {"TLS_RSA_WITH_3DES_EDE_CBC_SHA", "DES-CBC3-SHA"},
      {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
      {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
      {"TLS_RSA_WITH_AES_128_CBC_SHA256", "AES128-SHA256"},
      {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
      {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
      {"TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", "ECDHE-ECDSA-RC4-SHA"},
      {"TLS_ECDHE_RSA_WITH_RC4_128_SHA", "ECDHE-RSA-RC4-SHA"},
      {"TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", "ECDHE-RSA-DES-CBC3-SHA"},
      {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
      {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
      {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
      {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
      {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "ECDHE-ECDSA-AES128-SHA256"},
      {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "ECDHE-RSA-AES128-SHA256"},
      {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
      {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
      {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
      {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
      {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "ECDHE-RSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "ECDHE-ECDSA-CHACHA20-POLY1305"},
  };
  return m;
}

int version_number(const std::string& v) {
  if (v == "TLS1.2") return TLS1_2_VERSION;
  if (v == "TLS1.3") return TLS1_3_VERSION;
  return v.empty() ? 0 : -1;
}

Error version_error(const std::string& v) {
  return {Code::kInvalidArgument, "unexpected TLS version \"" + v + "\" (must be one of: TLS1.2, TLS1.3)"};
}

// Go's os.Open error text ("open PATH: no such file or directory").
std::string open_error(const std::string& path, int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return "open " + path + ": " + s;
}

// Certificates, keys, CAs and CRLs are files of kilobytes; a CRL of a big
// CA can reach megabytes. The bound keeps a path that became something
// else (a FIFO, /dev/zero, a huge file) from hanging or swelling the member
// while it re-reads certificates: only a regular file is read, opened
// without blocking, and no more than kMaxFileBytes of it.
constexpr size_t kMaxFileBytes = 64u << 20;

Error read_file(const std::string& flag, const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return {Code::kInvalidArgument, flag + " " + path + ": " + open_error(path, errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return {Code::kInvalidArgument, flag + " " + path + ": not a regular file"};
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    ::close(fd);
    return {Code::kInvalidArgument, flag + " " + path + ": larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB"};
  }
  out->clear();
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return {Code::kInvalidArgument, flag + " " + path + ": read " + path + ": " + std::strerror(err)};
    }
    if (n == 0) break;
    if (out->size() + static_cast<size_t>(n) > kMaxFileBytes) {
      ::close(fd);
      return {Code::kInvalidArgument, flag + " " + path + ": larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB"};
    }
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return {};
}

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
Bio mem_bio(const std::string& s) { return Bio(BIO_new_mem_buf(s.data(), static_cast<int>(s.size()))); }

// The CRL's problems etcd never looks at (it only compares serials,
// etcd's checkCRL): a CA the CRL does not cover, an expired CRL, its
// signature.
int verify_callback(int ok, X509_STORE_CTX* store) {
  if (ok) return 1;
  switch (X509_STORE_CTX_get_error(store)) {
    case X509_V_ERR_UNABLE_TO_GET_CRL:
    case X509_V_ERR_CRL_HAS_EXPIRED:
    case X509_V_ERR_CRL_NOT_YET_VALID:
    case X509_V_ERR_UNABLE_TO_GET_CRL_ISSUER:
    case X509_V_ERR_CRL_SIGNATURE_FAILURE:
    case X509_V_ERR_UNABLE_TO_DECRYPT_CRL_SIGNATURE:
      X509_STORE_CTX_set_error(store, X509_V_OK);
      return 1;
    default: return 0;
  }
}

// ALPN: HTTP/1.1 when offered (curl offers both), else h2 (gRPC).
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                void*) {
  static const unsigned char kHttp11[] = {'h', 't', 't', 'p', '/', '1', '.', '1'};
  static const unsigned char kH2[] = {'h', '2'};
  const unsigned char* h2 = nullptr;
  for (unsigned int i = 0; i < inlen;) {
    unsigned int n = in[i];
    if (i + 1 + n > inlen) break;
    const unsigned char* p = in + i + 1;
    if (n == sizeof(kHttp11) && std::memcmp(p, kHttp11, n) == 0) {
      *out = p;
      *outlen = static_cast<unsigned char>(n);
      return SSL_TLSEXT_ERR_OK;
    }
    if (n == sizeof(kH2) && std::memcmp(p, kH2, n) == 0) h2 = p;
    i += 1 + n;
  }
  if (!h2) return SSL_TLSEXT_ERR_NOACK;
  *out = h2;
  *outlen = 2;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

Error validate_tls_settings(const std::vector<std::string>& cipher_suites, const std::string& min_version,
                            const std::string& max_version) {
  for (const auto& s : cipher_suites) {
    if (!go_cipher_suites().count(s)) return {Code::kInvalidArgument, "unexpected TLS cipher suite \"" + s + "\""};
  }
  int min = version_number(min_version), max = version_number(max_version);
  if (min < 0) return version_error(min_version);
  if (max < 0) return version_error(max_version);
  if (max != 0 && min > max) {
    return {Code::kInvalidArgument,
            "min version (" + min_version + ") is greater than max version (" + max_version + ")"};
  }
  if (min == TLS1_3_VERSION && !cipher_suites.empty()) {
    return {Code::kInvalidArgument, "cipher suites cannot be configured when only TLS1.3 is enabled"};
  }
  return {};
}

Error TlsContext::open(TlsOptions options, std::shared_ptr<TlsContext>* out) {
  if (Error e = validate_tls_settings(options.cipher_suites, options.min_version, options.max_version)) return e;
  std::shared_ptr<TlsContext> c(new TlsContext(std::move(options)));
  c->stamp_ = c->stamp();
  if (Error e = c->build(&c->ctx_, &c->client_ctx_)) return e;
  c->next_check_ = std::chrono::steady_clock::now() + kCheckEvery;
  *out = std::move(c);
  return {};
}

TlsContext::~TlsContext() {
  if (ctx_) SSL_CTX_free(ctx_);
  if (client_ctx_) SSL_CTX_free(client_ctx_);
}

std::vector<std::string> TlsContext::stamp() const {
  std::vector<std::string> out;
  for (const std::string* f : {&options_.cert_file, &options_.key_file, &options_.trusted_ca_file, &options_.crl_file}) {
    struct stat st {};
    if (f->empty() || ::stat(f->c_str(), &st) != 0) {
      out.emplace_back();
      continue;
    }
    out.push_back(std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "/" +
                  std::to_string(st.st_size) + "/" + std::to_string(st.st_ino));
  }
  return out;
}

void TlsContext::refresh() {
  auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return;
  next_check_ = now + kCheckEvery;
  std::vector<std::string> s = stamp();
  if (s == stamp_ || s == failed_stamp_) return;
  SSL_CTX* fresh = nullptr;
  SSL_CTX* fresh_client = nullptr;
  if (Error e = build(&fresh, &fresh_client)) {
    // A rotation in progress (key written before the cert) or a broken
    // file: the old context serves until the files load together.
    spdlog::error("TLS files changed but do not load, still serving the previous certificate: {}", e.message());
    failed_stamp_ = s;
    return;
  }
  SSL_CTX_free(ctx_);
  ctx_ = fresh;
  if (client_ctx_) SSL_CTX_free(client_ctx_);
  client_ctx_ = fresh_client;
  stamp_ = s;
  failed_stamp_.clear();
  spdlog::info("reloaded TLS certificate {} and key {}", options_.cert_file, options_.key_file);
}

SSL_CTX* TlsContext::current() {
  std::lock_guard<std::mutex> lock(mu_);
  refresh();
  SSL_CTX_up_ref(ctx_);
  return ctx_;
}

SSL_CTX* TlsContext::current_client() {
  std::lock_guard<std::mutex> lock(mu_);
  refresh();
  if (client_ctx_) SSL_CTX_up_ref(client_ctx_);
  return client_ctx_;
}

std::string TlsContext::check_identity(const SSL* ssl) const {
  const TlsOptions& o = options_;
  if (o.allowed_cn.empty() && o.allowed_hostname.empty()) return "";
  X509* cert = SSL_get0_peer_certificate(ssl);
  const char* kRefused = "client certificate authentication failed";
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return kRefused;
  if (!o.allowed_cn.empty()) {
    X509_NAME* subject = X509_get_subject_name(cert);
    int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    std::string cn;
    if (i >= 0) {
      unsigned char* utf8 = nullptr;
      int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
      if (n > 0) cn.assign(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
      OPENSSL_free(utf8);
    }
    for (const auto& allowed : o.allowed_cn) {
      if (allowed == cn) return "";
    }
    return std::string(kRefused) + " (certificate CN \"" + cn + "\" is not in --" + o.flag_prefix + "cert-allowed-cn)";
  }
  for (const auto& h : o.allowed_hostname) {
    unsigned char buf[16];
    bool ip = inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
    if (ip ? X509_check_ip_asc(cert, h.c_str(), 0) == 1
           : X509_check_host(cert, h.c_str(), h.size(), X509_CHECK_FLAG_NEVER_CHECK_SUBJECT, nullptr) == 1) {
      return "";
    }
  }
  return std::string(kRefused) + " (certificate is not valid for --" + o.flag_prefix + "cert-allowed-hostname)";
}

Error TlsContext::build(SSL_CTX** out, SSL_CTX** client_out) const {
  const TlsOptions& o = options_;
  const std::string cert_flag = "--" + o.flag_prefix + "cert-file";
  const std::string key_flag = "--" + o.flag_prefix + "key-file";
  const std::string ca_flag = "--" + o.flag_prefix + "trusted-ca-file";
  const std::string crl_flag = o.flag_prefix.empty() ? "--client-crl-file" : "--" + o.flag_prefix + "crl-file";
  std::string cert_pem, key_pem, ca_pem, crl_data;
  if (o.cert_file.empty() || o.key_file.empty()) {
    return {Code::kInvalidArgument, "KeyFile and CertFile must both be present[key: " + o.key_file +
                                        ", cert: " + o.cert_file + "]"};
  }
  if (Error e = read_file(cert_flag, o.cert_file, &cert_pem)) return e;
  if (Error e = read_file(key_flag, o.key_file, &key_pem)) return e;
  if (!o.trusted_ca_file.empty()) {
    if (Error e = read_file(ca_flag, o.trusted_ca_file, &ca_pem)) return e;
  }
  if (!o.crl_file.empty()) {
    if (Error e = read_file(crl_flag, o.crl_file, &crl_data)) return e;
  }
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return {Code::kInternal, "SSL_CTX_new: " + openssl_error()};
  SSL_CTX_set_min_proto_version(ctx.get(), version_number(o.min_version));
  SSL_CTX_set_max_proto_version(ctx.get(), version_number(o.max_version));
  // A client that drops TCP without close_notify ends its stream like one
  // that sent it (Go's crypto/tls reads that as io.EOF too).
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  // Partial writes: the pump hands SSL_write what it has and retries the
  // rest from wherever its buffer moved. Release buffers: an idle
  // connection holds no 2 x 17 KiB record buffers.
  SSL_CTX_set_mode(ctx.get(),
                   SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  std::string ciphers;
  for (const auto& s : o.cipher_suites) {
    const std::string& name = go_cipher_suites().at(s);
    if (!name.empty()) ciphers += (ciphers.empty() ? "" : ":") + name;
  }
  if (!ciphers.empty() && SSL_CTX_set_cipher_list(ctx.get(), ciphers.c_str()) != 1) {
    return {Code::kInvalidArgument, "--cipher-suites: OpenSSL has none of these cipher suites: " + ciphers};
  }

  // The chain: the first PEM certificate is the server's, the rest its
  // intermediates (Go's tls.X509KeyPair).
  {
    Bio bio = mem_bio(cert_pem);
    X509* leaf = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (!leaf) {
      return {Code::kInvalidArgument,
              cert_flag + " " + o.cert_file + ": tls: failed to find any PEM data in certificate input"};
    }
    int ok = SSL_CTX_use_certificate(ctx.get(), leaf);
    X509_free(leaf);
    if (ok != 1) return {Code::kInvalidArgument, cert_flag + " " + o.cert_file + ": " + openssl_error()};
    while (X509* extra = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      if (SSL_CTX_add0_chain_cert(ctx.get(), extra) != 1) {
        X509_free(extra);
        return {Code::kInvalidArgument, cert_flag + " " + o.cert_file + ": " + openssl_error()};
      }
    }
    ERR_clear_error();  // the end of the chain reads as "no start line"
  }
  {
    Bio bio = mem_bio(key_pem);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
    if (!key) {
      ERR_clear_error();
      return {Code::kInvalidArgument, key_flag + " " + o.key_file + ": tls: failed to find any PEM data in key input"};
    }
    int ok = SSL_CTX_use_PrivateKey(ctx.get(), key);
    EVP_PKEY_free(key);
    if (ok != 1 || SSL_CTX_check_private_key(ctx.get()) != 1) {
      ERR_clear_error();
      return {Code::kInvalidArgument, key_flag + " " + o.key_file + " and " + cert_flag + " " + o.cert_file +
                                          ": tls: private key does not match public key"};
    }
  }

  // Client certificates (etcd's ServerConfig: a trusted CA or
  // client-cert-auth requires and verifies one).
  X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
  if (!o.trusted_ca_file.empty()) {
    Bio bio = mem_bio(ca_pem);
    STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
    int n = 0;
    while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(store, ca);
      if (X509_NAME* name = X509_NAME_dup(X509_get_subject_name(ca))) sk_X509_NAME_push(names, name);
      X509_free(ca);
      ++n;
    }
    ERR_clear_error();
    if (n == 0) {
      sk_X509_NAME_pop_free(names, X509_NAME_free);
      return {Code::kInvalidArgument, ca_flag + " " + o.trusted_ca_file + ": no PEM certificate in it"};
    }
    SSL_CTX_set_client_CA_list(ctx.get(), names);
  } else if (o.client_cert_auth) {
    SSL_CTX_set_default_verify_paths(ctx.get());
  }
  if (!o.trusted_ca_file.empty() || o.client_cert_auth) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_callback);
  }
  if (!o.crl_file.empty()) {
    Bio bio = mem_bio(crl_data);
    int n = 0;
    while (X509_CRL* crl = PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_crl(store, crl);
      X509_CRL_free(crl);
      ++n;
    }
    ERR_clear_error();
    if (n == 0) {  // DER, as etcd's x509.ParseCRL also takes
      const unsigned char* p = reinterpret_cast<const unsigned char*>(crl_data.data());
      if (X509_CRL* crl = d2i_X509_CRL(nullptr, &p, static_cast<long>(crl_data.size()))) {
        X509_STORE_add_crl(store, crl);
        X509_CRL_free(crl);
        ++n;
      }
      ERR_clear_error();
    }
    if (n == 0) return {Code::kInvalidArgument, crl_flag + " " + o.crl_file + ": no CRL (PEM or DER) in it"};
    // Every certificate of the chain, not the leaf alone: etcd's checkCRL
    // looks up each certificate the other side presents, so a revoked
    // intermediate CA refuses what it issued. A CRL of the root itself, or
    // none for a CA, is among the problems verify_callback forgives.
    X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
  }
  SSL_CTX_set_alpn_select_cb(ctx.get(), select_alpn, nullptr);
  // Session resumption within one context (tickets are keyed per context).
  SSL_CTX_set_session_id_context(ctx.get(), reinterpret_cast<const unsigned char*>("etcdq"), 5);
  *client_out = nullptr;
  if (o.dial) {
    // The same identity, roots and CRL (one store, shared).
    std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> cc(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
    if (!cc) return {Code::kInternal, "SSL_CTX_new: " + openssl_error()};
    SSL_CTX_set_min_proto_version(cc.get(), version_number(o.min_version));
    SSL_CTX_set_max_proto_version(cc.get(), version_number(o.max_version));
    SSL_CTX_set_options(cc.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(cc.get(),
                     SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    if (!ciphers.empty()) SSL_CTX_set_cipher_list(cc.get(), ciphers.c_str());
    if (SSL_CTX_use_certificate(cc.get(), SSL_CTX_get0_certificate(ctx.get())) != 1 ||
        SSL_CTX_use_PrivateKey(cc.get(), SSL_CTX_get0_privatekey(ctx.get())) != 1) {
      return {Code::kInternal, cert_flag + " " + o.cert_file + ": " + openssl_error()};
    }
    STACK_OF(X509)* chain = nullptr;
    SSL_CTX_get0_chain_certs(ctx.get(), &chain);
    for (int i = 0; chain != nullptr && i < sk_X509_num(chain); ++i) {
      SSL_CTX_add1_chain_cert(cc.get(), sk_X509_value(chain, i));
    }
    if (!o.trusted_ca_file.empty()) {
      SSL_CTX_set1_cert_store(cc.get(), store);
    } else {
      SSL_CTX_set_default_verify_paths(cc.get());
    }
    SSL_CTX_set_verify(cc.get(), o.skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, o.skip_verify ? nullptr : verify_callback);
    *client_out = cc.release();
  }
  *out = ctx.release();
  return {};
}

Error self_signed_cert(const std::string& dir, const std::vector<std::string>& hosts, std::string* cert_file,
                       std::string* key_file) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return {Code::kInvalidArgument, "--auto-tls: cannot create " + dir + ": " + ec.message()};
  std::string cert_path = std::filesystem::absolute(std::filesystem::path(dir) / "cert.pem").string();
  std::string key_path = std::filesystem::absolute(std::filesystem::path(dir) / "key.pem").string();
  *cert_file = cert_path;
  *key_file = key_path;
  if (std::filesystem::exists(cert_path, ec) && std::filesystem::exists(key_path, ec)) return {};

  auto fail = [](const std::string& what) {
    return Error{Code::kInternal, "--auto-tls: cannot generate the certificate: " + what + ": " + openssl_error()};
  };
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> key(EVP_EC_gen("P-521"), EVP_PKEY_free);
  if (!key) return fail("EC key");
  std::unique_ptr<X509, void (*)(X509*)> x(X509_new(), X509_free);
  X509_set_version(x.get(), 2);
  std::unique_ptr<BIGNUM, void (*)(BIGNUM*)> serial(BN_new(), BN_free);
  BN_rand(serial.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY);
  BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x.get()));
  X509_gmtime_adj(X509_getm_notBefore(x.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 365L * 24 * 3600);
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("etcd"), -1, -1, 0);
  X509_set_issuer_name(x.get(), name);
  X509_set_pubkey(x.get(), key.get());
  std::string san;
  for (const auto& h : hosts) {
    unsigned char buf[16];
    bool ip = inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
    san += (san.empty() ? "" : ",") + std::string(ip ? "IP:" : "DNS:") + h;
  }
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x.get(), x.get(), nullptr, nullptr, 0);
  std::vector<std::pair<int, std::string>> exts = {
      {NID_key_usage, "critical,keyEncipherment,digitalSignature,cRLSign"},
      {NID_ext_key_usage, "serverAuth"},
      {NID_basic_constraints, "critical,CA:TRUE"},
  };
  if (!san.empty()) exts.emplace_back(NID_subject_alt_name, san);
  for (const auto& [nid, value] : exts) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
    if (!ext) return fail("extension " + value);
    X509_add_ext(x.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(x.get(), key.get(), EVP_sha512()) == 0) return fail("sign");

  // The key first, 0600 from the start; a crash between the two leaves no
  // cert.pem, so the next start generates both again.
  {
    FILE* f = nullptr;
    int fd = ::open(key_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) f = fdopen(fd, "w");
    if (!f) return {Code::kInvalidArgument, "--auto-tls: " + open_error(key_path, errno)};
    // SEC 1 ("EC PRIVATE KEY"), as etcd writes it (x509.MarshalECPrivateKey).
    BIO* b = BIO_new_fp(f, BIO_NOCLOSE);
    int ok = b ? PEM_write_bio_PrivateKey_traditional(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr) : 0;
    if (b) BIO_free(b);
    if (std::fclose(f) != 0 || ok != 1) return fail("write " + key_path);
  }
  {
    FILE* f = std::fopen(cert_path.c_str(), "w");
    if (!f) return {Code::kInvalidArgument, "--auto-tls: " + open_error(cert_path, errno)};
    int ok = PEM_write_X509(f, x.get());
    if (std::fclose(f) != 0 || ok != 1) return fail("write " + cert_path);
  }
  spdlog::warn("automatically generated a self-signed certificate {} (valid one year)", cert_path);
  return {};
}

}  // namespace etcdq::net
