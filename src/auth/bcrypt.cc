#include "auth/bcrypt.h"

#include <crypt.h>
#include <openssl/crypto.h>

#include <cstring>
#include <memory>

namespace etcdq::auth {
namespace {

// bcrypt uses only the first 72 bytes of a password; Go's bcrypt refuses
// longer passwords since 0.19 but etcd 3.4/3.5 accept them (and hash their
// first 72 bytes). crypt(3) takes a C string, so a NUL in those bytes would
// end the password early ("\0secret" would be the empty password): such a
// password is never hashed and never matches (has_nul).
std::string as_c_password(std::string_view password) { return std::string(password.substr(0, 72)); }

bool has_nul(std::string_view password) { return password.substr(0, 72).find('\0') != std::string_view::npos; }

}  // namespace

Error bcrypt_hash(std::string_view password, int cost, std::string* hash) {
  if (has_nul(password)) {
    return {Code::kInvalidArgument, "etcdserver: a password may not contain a NUL byte in its first 72 bytes"};
  }
  if (cost < kMinBcryptCost || cost > kMaxBcryptCost) cost = kDefaultBcryptCost;
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  // A null random buffer makes libxcrypt draw the salt from the OS.
  if (crypt_gensalt_rn("$2b$", static_cast<unsigned long>(cost), nullptr, 0, salt, sizeof salt) == nullptr) {
    return errors::internal("bcrypt: cannot make a salt");
  }
  auto data = std::make_unique<crypt_data>();
  std::memset(data.get(), 0, sizeof(crypt_data));
  std::string p = as_c_password(password);
  const char* out = crypt_r(p.c_str(), salt, data.get());
  OPENSSL_cleanse(p.data(), p.size());
  if (out == nullptr || out[0] == '*') return errors::internal("bcrypt: hashing failed");
  *hash = out;
  OPENSSL_cleanse(data.get(), sizeof(crypt_data));
  return {};
}

bool bcrypt_matches(std::string_view hash, std::string_view password) {
  if (!(hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$"))) return false;
  if (has_nul(password)) return false;
  auto data = std::make_unique<crypt_data>();
  std::memset(data.get(), 0, sizeof(crypt_data));
  std::string p = as_c_password(password);
  std::string setting(hash);
  const char* out = crypt_r(p.c_str(), setting.c_str(), data.get());
  OPENSSL_cleanse(p.data(), p.size());
  bool ok = out != nullptr && out[0] != '*' && std::strlen(out) == hash.size() &&
            CRYPTO_memcmp(out, hash.data(), hash.size()) == 0;
  OPENSSL_cleanse(data.get(), sizeof(crypt_data));
  return ok;
}

}  // namespace etcdq::auth
