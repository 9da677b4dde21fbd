// Password hashes as etcd keeps them: bcrypt ("$2b$", as Go's
// golang.org/x/crypto/bcrypt writes "$2a$", which verifies the same way),
// through the system's crypt library (libxcrypt's crypt_r and
// crypt_gensalt_rn). etcd hashes on the member that receives UserAdd or
// UserChangePassword, before proposing (server/etcdserver/v3_server.go), so
// the log carries the hash and never the password; etcdq does the same.
//
// Cost: etcd's --bcrypt-cost, 4..31 (bcrypt.MinCost..MaxCost), default 10.
// A hash at cost 10 takes tens of milliseconds of one core (bench/RESULTS.md, "Measurements moved from headers"):
// callers must not run it on a thread that others wait on (the consensus
// or apply thread).
//
// Thread-safety: any thread (crypt_r keeps its state on the stack).
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace etcdq::auth {

inline constexpr int kMinBcryptCost = 4;
inline constexpr int kMaxBcryptCost = 31;
inline constexpr int kDefaultBcryptCost = 10;

// A new hash of `password` at `cost` with a fresh random salt. Errors:
// internal when the crypt library has no bcrypt or no randomness.
Error bcrypt_hash(std::string_view password, int cost, std::string* hash);

// True when `password` matches `hash` (compared in constant time). A hash
// that is not a bcrypt one never matches.
bool bcrypt_matches(std::string_view hash, std::string_view password);

}  // namespace etcdq::auth
