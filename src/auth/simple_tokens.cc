#include "auth/simple_tokens.h"

#include <openssl/rand.h>

#include <algorithm>
#include <vector>

namespace etcdq::auth {
namespace {

constexpr std::string_view kLetters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
constexpr size_t kTokenLetters = 16;

std::string random_letters() {
  unsigned char bytes[kTokenLetters];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // Never expected; a token must still not be guessable: retry.
    while (RAND_bytes(bytes, sizeof bytes) != 1) {
    }
  }
  std::string s;
  // 256 % 52 != 0: reject the top values so letters are uniform.
  for (size_t i = 0; s.size() < kTokenLetters; ++i) {
    if (i == kTokenLetters) {
      RAND_bytes(bytes, sizeof bytes);
      i = 0;
    }
    if (bytes[i] >= 208) continue;
    s.push_back(kLetters[bytes[i] % kLetters.size()]);
  }
  return s;
}

}  // namespace

std::string SimpleTokens::assign(std::string_view user, std::string_view password_hash, uint64_t index) {
  std::string token = random_letters() + "." + std::to_string(index);
  auto now = Clock::now();
  std::lock_guard lock(mu_);
  if (tokens_.size() >= kMaxTokens) drop_expired(now);
  if (tokens_.size() >= kMaxTokens) {
    // Still full: the tokens closest to expiry go first.
    std::vector<std::pair<Clock::time_point, std::string>> by_expiry;
    by_expiry.reserve(tokens_.size());
    for (const auto& [t, e] : tokens_) by_expiry.emplace_back(e.expires, t);
    size_t drop = tokens_.size() / 8 + 1;
    std::nth_element(by_expiry.begin(), by_expiry.begin() + static_cast<long>(drop), by_expiry.end());
    for (size_t i = 0; i < drop; ++i) tokens_.erase(by_expiry[i].second);
  }
  tokens_[token] = Entry{std::string(user), std::string(password_hash), now + ttl_};
  return token;
}

bool SimpleTokens::lookup(std::string_view token, std::string* user, std::string* password_hash) {
  auto now = Clock::now();
  std::lock_guard lock(mu_);
  auto it = tokens_.find(std::string(token));
  if (it == tokens_.end()) return false;
  if (it->second.expires <= now) {
    tokens_.erase(it);
    return false;
  }
  it->second.expires = now + ttl_;
  *user = it->second.user;
  *password_hash = it->second.hash;
  return true;
}

void SimpleTokens::invalidate(std::string_view token) {
  std::lock_guard lock(mu_);
  tokens_.erase(std::string(token));
}

void SimpleTokens::disable_all() {
  std::lock_guard lock(mu_);
  tokens_.clear();
}

size_t SimpleTokens::size() const {
  std::lock_guard lock(mu_);
  return tokens_.size();
}

void SimpleTokens::drop_expired(Clock::time_point now) {
  for (auto it = tokens_.begin(); it != tokens_.end();) {
    it = it->second.expires <= now ? tokens_.erase(it) : std::next(it);
  }
}

}  // namespace etcdq::auth
