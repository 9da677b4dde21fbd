// etcd's JWT tokens (server/auth/jwt.go, options.go): `--auth-token
// jwt,pub-key=FILE,priv-key=FILE,sign-method=ALG,ttl=DURATION`. A token
// is a JWS signed with the member's key, with the claims "username",
// "revision" (the auth revision the password was checked at) and "exp"
// (now + ttl, Unix seconds), so any member with the public key (or the
// HMAC secret) verifies it: unlike simple tokens, valid on every member.
// A member given only pub-key verifies but cannot sign (etcd's
// verify-only provider: its Authenticate fails with verify_only()).
//
// Signing and verification are Debian's libjwt (1.10: HS256/384/512,
// RS256/384/512, ES256/384/512; etcd's PS* and EdDSA are refused at
// start); keys are PEM files read with OpenSSL.
//
// Thread-safety: immutable after create(); any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"

namespace etcdq::auth {

// The options after "jwt," as etcd's decomposeOpts splits them.
struct JwtOptions {
  std::string sign_method;  // "RS256", "ES256", "HS256", ...
  std::string pub_key;      // file path, may be empty
  std::string priv_key;     // file path, may be empty
  std::chrono::seconds ttl{300};  // etcd's DefaultTTL: 5 minutes
};

// etcd's messages for a bad provider (server/auth/store.go).
Error invalid_auth_opts(std::string_view detail);  // "auth: invalid auth options"

class JwtTokens {
 public:
  ~JwtTokens();
  // Reads and checks the keys. Errors are etcd 3.5's messages, with the
  // option and file added: "auth: invalid auth options" (an unknown or
  // unsupported sign-method, a key file that cannot be read), "invalid key: Key must be a PEM encoded PKCS1 or
  // PKCS8 key" (not a key), "key is not a valid RSA private key" (and
  // ECDSA/public variants: a key of the wrong type), "auth: missing key
  // data" (no key for the method), "auth: public and private keys don't
  // match".
  static Error create(const JwtOptions& opts, std::unique_ptr<JwtTokens>* out);

  bool verify_only() const { return sign_key_.empty(); }
  // A signed token for `user`, whose password was checked at auth
  // revision `revision`; expires ttl from now. verify_only() members:
  // errors::jwt_verify_only().
  Error assign(std::string_view user, uint64_t revision, std::string* token) const;
  // The token's user and revision when its signature verifies with this
  // member's key under the configured method (a token naming any other
  // "alg", "none" included, is refused), it carries both claims, and it
  // has not expired ("exp", and "nbf"/"iat" not in the future). False
  // otherwise (the caller answers errors::invalid_auth_token()).
  bool info(std::string_view token, std::string* user, uint64_t* revision) const;

 private:
  JwtTokens() = default;
  int alg_ = 0;             // libjwt's jwt_alg_t
  std::string sign_key_;    // PEM private key or HMAC secret; empty: verify-only
  std::string verify_key_;  // PEM public key or HMAC secret
  std::chrono::seconds ttl_{300};
};

}  // namespace etcdq::auth
