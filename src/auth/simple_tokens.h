// etcd's simple tokens (server/auth/simple_token.go): a random string of 16
// letters, ".", and an index, known only to the member that issued it (a
// client reconnecting to another member authenticates again, as with
// etcd). A token expires --auth-token-ttl seconds after its last use (each
// successful use restarts the clock, as etcd's TTL keeper does). Tokens of
// a user die when the user is deleted or its password changes (checked on
// use against the user's current record), and all die when auth is
// disabled (disable_all).
//
// Bounded: at most kMaxTokens live tokens; beyond that the oldest are
// dropped (their clients re-authenticate).
//
// Thread-safety: any thread (one mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace etcdq::auth {

class SimpleTokens {
 public:
  static constexpr size_t kMaxTokens = 1 << 20;
  using Clock = std::chrono::steady_clock;

  explicit SimpleTokens(std::chrono::seconds ttl) : ttl_(ttl) {}

  // A new token for `user`; `password_hash` is the user's hash when it
  // authenticated (a later password change invalidates the token).
  std::string assign(std::string_view user, std::string_view password_hash, uint64_t index);
  // The token's user and hash at issue, if the token is live; refreshes its
  // TTL. False for an unknown or expired token.
  bool lookup(std::string_view token, std::string* user, std::string* password_hash);
  void invalidate(std::string_view token);
  void disable_all();
  size_t size() const;

 private:
  struct Entry {
    std::string user;
    std::string hash;
    Clock::time_point expires;
  };
  void drop_expired(Clock::time_point now);  // mu_ held

  const std::chrono::seconds ttl_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> tokens_;
};

}  // namespace etcdq::auth
