// JWT tokens (auth/jwt_tokens.h): what one provider signs another with the
// same public key verifies; a verify-only provider cannot sign; tokens with
// another "alg" (none, or HS256 keyed with the RSA public key), a changed
// payload or a past "exp" are refused; bad key files are refused with
// etcd's messages.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>

#include "auth/jwt_tokens.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;

std::string b64url(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

class JwtTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etcdq-jwt-unit-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    EVP_PKEY* k = EVP_RSA_gen(2048);
    ASSERT_NE(k, nullptr);
    write(priv_, [k](BIO* b) { return PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr); });
    write(pub_, [k](BIO* b) { return PEM_write_bio_PUBKEY(b, k); });
    EVP_PKEY_free(k);
    std::ofstream(dir_ / "secret") << "a shared secret";
    std::ofstream(dir_ / "garbage") << "not a key";
  }
  void TearDown() override { fs::remove_all(dir_); }

  template <typename Fn>
  void write(const char* name, Fn fn) {
    BIO* b = BIO_new(BIO_s_mem());
    ASSERT_EQ(fn(b), 1);
    char* p = nullptr;
    long n = BIO_get_mem_data(b, &p);
    std::ofstream(dir_ / name, std::ios::binary).write(p, n);
    BIO_free(b);
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::string read(const char* name) const {
    std::ifstream f(dir_ / name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::unique_ptr<auth::JwtTokens> make(const std::string& method, const char* pub, const char* priv,
                                        std::chrono::seconds ttl = std::chrono::seconds(300)) {
    auth::JwtOptions o;
    o.sign_method = method;
    if (pub) o.pub_key = path(pub);
    if (priv) o.priv_key = path(priv);
    o.ttl = ttl;
    std::unique_ptr<auth::JwtTokens> t;
    Error e = auth::JwtTokens::create(o, &t);
    EXPECT_FALSE(e) << e.message();
    return t;
  }
  std::string refusal(const std::string& method, const char* pub, const char* priv) {
    auth::JwtOptions o;
    o.sign_method = method;
    if (pub) o.pub_key = path(pub);
    if (priv) o.priv_key = path(priv);
    std::unique_ptr<auth::JwtTokens> t;
    return auth::JwtTokens::create(o, &t).message();
  }

  fs::path dir_;
  static constexpr const char* priv_ = "rsa.key";
  static constexpr const char* pub_ = "rsa.pub";
};

TEST_F(JwtTokensTest, TokenSignedByOneProviderVerifiesOnAVerifyOnlyOne) {
  auto signer = make("RS256", pub_, priv_);
  auto verifier = make("RS256", pub_, nullptr);
  ASSERT_TRUE(signer && verifier);
  EXPECT_TRUE(verifier->verify_only());
  std::string token;
  ASSERT_FALSE(signer->assign("alice", 7, &token));
  std::string user;
  uint64_t rev = 0;
  ASSERT_TRUE(verifier->info(token, &user, &rev));
  EXPECT_EQ(user, "alice");
  EXPECT_EQ(rev, 7u);
  EXPECT_EQ(verifier->assign("alice", 7, &token).message(), "auth: token signing attempted with verify-only key");
}

TEST_F(JwtTokensTest, OtherAlgorithmsTamperingAndExpiryAreRefused) {
  auto t = make("RS256", nullptr, priv_, std::chrono::seconds(1));
  ASSERT_TRUE(t);
  std::string token;
  ASSERT_FALSE(t->assign("alice", 3, &token));
  std::string user;
  uint64_t rev = 0;
  ASSERT_TRUE(t->info(token, &user, &rev));
  std::string payload = token.substr(token.find('.') + 1, token.rfind('.') - token.find('.') - 1);
  std::string none = b64url(R"({"alg":"none","typ":"JWT"})");
  EXPECT_FALSE(t->info(none + "." + payload + ".", &user, &rev));
  // HS256 keyed with the public key PEM: libjwt would verify it as HMAC;
  // the provider's method check refuses it.
  auto hs = make("HS256", nullptr, pub_);
  std::string forged;
  ASSERT_FALSE(hs->assign("root", 3, &forged));
  EXPECT_FALSE(t->info(forged, &user, &rev));
  std::string changed = token;
  changed[token.find('.') + 5] ^= 1;
  EXPECT_FALSE(t->info(changed, &user, &rev));
  EXPECT_FALSE(t->info("", &user, &rev));
  EXPECT_FALSE(t->info("a.b.c", &user, &rev));
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_FALSE(t->info(token, &user, &rev));
}

TEST_F(JwtTokensTest, BadKeysAndMethodsAreRefusedWithEtcdsMessages) {
  EXPECT_EQ(refusal("RS256", nullptr, nullptr).rfind("auth: missing key data", 0), 0u);
  EXPECT_EQ(refusal("HS256", pub_, nullptr).rfind("auth: missing key data", 0), 0u);
  EXPECT_EQ(refusal("PS256", pub_, priv_).rfind("auth: invalid auth options", 0), 0u);
  EXPECT_EQ(refusal("RS256", "missing", priv_).rfind("auth: invalid auth options", 0), 0u);
  EXPECT_EQ(refusal("RS256", "garbage", priv_).rfind("invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key", 0),
            0u);
  EXPECT_EQ(refusal("ES256", nullptr, priv_).rfind("key is not a valid ECDSA private key", 0), 0u);
  EXPECT_FALSE(make("HS512", nullptr, "secret")->verify_only());
}

}  // namespace
}  // namespace etcdq
