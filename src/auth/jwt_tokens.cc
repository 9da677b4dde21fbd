#include "auth/jwt_tokens.h"

#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace etcdq::auth {
namespace {

// A key file larger than this is not a key (and is not read whole).
constexpr size_t kMaxKeyFileBytes = 1 << 20;

struct JwtFree {
  void operator()(jwt_t* j) const { jwt_free(j); }
};
using JwtPtr = std::unique_ptr<jwt_t, JwtFree>;
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

Error read_key_file(std::string_view option, const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_auth_opts(std::string(option) + "=" + path + ": cannot be read");
  std::string data(kMaxKeyFileBytes + 1, '\0');
  f.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (f.bad()) return invalid_auth_opts(std::string(option) + "=" + path + ": cannot be read");
  data.resize(static_cast<size_t>(f.gcount()));
  if (data.size() > kMaxKeyFileBytes) return invalid_auth_opts(std::string(option) + "=" + path + ": too large for a key");
  *out = std::move(data);
  return {};
}

PkeyPtr parse_private(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  // No passphrase callback: an encrypted key fails instead of prompting.
  PkeyPtr k(PEM_read_bio_PrivateKey(bio, nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  BIO_free(bio);
  return k;
}

PkeyPtr parse_public(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  PkeyPtr k(PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return k;
}

std::string public_pem(EVP_PKEY* k) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return "";
  std::string out;
  if (PEM_write_bio_PUBKEY(bio, k) == 1) {
    char* p = nullptr;
    long n = BIO_get_mem_data(bio, &p);
    if (n > 0) out.assign(p, static_cast<size_t>(n));
  }
  BIO_free(bio);
  return out;
}

}  // namespace

Error invalid_auth_opts(std::string_view detail) {
  return Error(Code::kInvalidArgument, "auth: invalid auth options (" + std::string(detail) + ")");
}

JwtTokens::~JwtTokens() = default;

Error JwtTokens::create(const JwtOptions& opts, std::unique_ptr<JwtTokens>* out) {
  jwt_alg_t alg = jwt_str_alg(opts.sign_method.c_str());
  if (alg == JWT_ALG_INVAL || alg == JWT_ALG_NONE) {
    // etcd reports ErrInvalidAuthMethod as "auth: invalid auth options".
    return invalid_auth_opts("sign-method=" + opts.sign_method +
                             ": not one of HS256/384/512, RS256/384/512, ES256/384/512 (etcdq has no PS* or EdDSA)");
  }
  std::string pub;
  std::string priv;
  if (!opts.pub_key.empty()) {
    if (Error e = read_key_file("pub-key", opts.pub_key, &pub)) return e;
  }
  if (!opts.priv_key.empty()) {
    if (Error e = read_key_file("priv-key", opts.priv_key, &priv)) return e;
  }
  std::unique_ptr<JwtTokens> t(new JwtTokens());
  t->alg_ = alg;
  t->ttl_ = opts.ttl;
  bool hmac = alg == JWT_ALG_HS256 || alg == JWT_ALG_HS384 || alg == JWT_ALG_HS512;
  if (hmac) {
    // etcd's hmacKey: the priv-key file's bytes are the shared secret.
    if (priv.empty()) return Error(Code::kInvalidArgument, "auth: missing key data (HMAC needs priv-key)");
    t->sign_key_ = priv;
    t->verify_key_ = priv;
    *out = std::move(t);
    return {};
  }
  // golang-jwt's Parse{RSA,EC}{Private,Public}KeyFromPEM messages, as etcd
  // refuses such a file (with the option and file added).
  bool ec = alg == JWT_ALG_ES256 || alg == JWT_ALG_ES384 || alg == JWT_ALG_ES512;
  int want = ec ? EVP_PKEY_EC : EVP_PKEY_RSA;
  std::string kind = ec ? "ECDSA" : "RSA";
  auto not_pem = [](const std::string& where) {
    return Error(Code::kInvalidArgument, "invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key (" + where + ")");
  };
  PkeyPtr priv_key;
  PkeyPtr pub_key;
  if (!priv.empty()) {
    std::string where = "priv-key=" + opts.priv_key;
    priv_key = parse_private(priv);
    if (!priv_key) return not_pem(where);
    if (EVP_PKEY_get_base_id(priv_key.get()) != want) {
      return Error(Code::kInvalidArgument, "key is not a valid " + kind + " private key (" + where + ")");
    }
  }
  if (!pub.empty()) {
    std::string where = "pub-key=" + opts.pub_key;
    pub_key = parse_public(pub);
    if (!pub_key) return not_pem(where);
    if (EVP_PKEY_get_base_id(pub_key.get()) != want) {
      return Error(Code::kInvalidArgument, "key is not a valid " + kind + " public key (" + where + ")");
    }
  }
  if (!priv_key && !pub_key) return Error(Code::kInvalidArgument, "auth: missing key data (give pub-key and/or priv-key)");
  if (priv_key && pub_key && EVP_PKEY_eq(priv_key.get(), pub_key.get()) != 1) {
    return Error(Code::kInvalidArgument, "auth: public and private keys don't match (pub-key=" + opts.pub_key +
                                             ", priv-key=" + opts.priv_key + ")");
  }
  if (priv_key) t->sign_key_ = priv;
  t->verify_key_ = pub_key ? pub : public_pem(priv_key.get());
  if (t->verify_key_.empty()) return invalid_auth_opts("priv-key=" + opts.priv_key + ": no public key derived");
  *out = std::move(t);
  return {};
}

Error JwtTokens::assign(std::string_view user, uint64_t revision, std::string* token) const {
  if (verify_only()) return errors::jwt_verify_only();
  jwt_t* raw = nullptr;
  if (jwt_new(&raw) != 0) return errors::internal("jwt_new failed");
  JwtPtr j(raw);
  std::string name(user);
  auto exp = std::chrono::duration_cast<std::chrono::seconds>(
                 (std::chrono::system_clock::now() + ttl_).time_since_epoch())
                 .count();
  if (jwt_add_grant(j.get(), "username", name.c_str()) != 0 ||
      jwt_add_grant_int(j.get(), "revision", static_cast<long>(revision)) != 0 ||
      jwt_add_grant_int(j.get(), "exp", static_cast<long>(exp)) != 0 ||
      jwt_set_alg(j.get(), static_cast<jwt_alg_t>(alg_), reinterpret_cast<const unsigned char*>(sign_key_.data()),
                  static_cast<int>(sign_key_.size())) != 0) {
    return errors::internal("building a JWT failed");
  }
  char* s = jwt_encode_str(j.get());
  if (s == nullptr) return errors::internal("signing a JWT failed");
  token->assign(s);
  free(s);  // libjwt 1.10 allocates with malloc (no jwt_free_str yet)
  return {};
}

bool JwtTokens::info(std::string_view token, std::string* user, uint64_t* revision) const {
  std::string t(token);
  jwt_t* raw = nullptr;
  // libjwt verifies with the algorithm the token's header names: the check
  // of that name against ours below is what stops a token signed "none",
  // or HMAC-signed with our public key as the secret.
  if (jwt_decode(&raw, t.c_str(), reinterpret_cast<const unsigned char*>(verify_key_.data()),
                 static_cast<int>(verify_key_.size())) != 0 ||
      raw == nullptr) {
    return false;
  }
  JwtPtr j(raw);
  if (jwt_get_alg(j.get()) != static_cast<jwt_alg_t>(alg_)) return false;
  const char* name = jwt_get_grant(j.get(), "username");
  if (name == nullptr) return false;
  errno = 0;
  long rev = jwt_get_grant_int(j.get(), "revision");
  if (errno != 0 || rev < 0) return false;
  // golang-jwt's MapClaims.Valid: exp in the past, or nbf/iat in the
  // future, make the token invalid; absent claims are not checked.
  long now = static_cast<long>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  errno = 0;
  long exp = jwt_get_grant_int(j.get(), "exp");
  if (errno == 0 && now > exp) return false;
  errno = 0;
  long nbf = jwt_get_grant_int(j.get(), "nbf");
  if (errno == 0 && now < nbf) return false;
  errno = 0;
  long iat = jwt_get_grant_int(j.get(), "iat");
  if (errno == 0 && now < iat) return false;
  *user = name;
  *revision = static_cast<uint64_t>(rev);
  return true;
}

}  // namespace etcdq::auth
