// What one user may read and write, as etcd's range permission cache
// (server/auth/range_perm_cache.go): the key permissions of all the user's
// roles, merged into one set of disjoint key intervals for READ and one for
// WRITE (READWRITE counts for both). A request is permitted when the set
// covers its whole interval, even if no single permission does (two
// adjacent grants together cover the range across them).
//
// Intervals use etcd's range_end convention: an empty range_end is the one
// key (the interval [key, key+"\0")), "\0" means every key from `key` up
// (from-key; prefix grants arrive as [prefix, prefix+1) from the client).
//
// Thread-safety: immutable once built; share it freely.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "etcd/api/authpb/auth.pb.h"

namespace etcdq::auth {

enum class Access { kRead, kWrite };

class RangePerms {
 public:
  RangePerms() = default;
  // The union of `roles`' permissions.
  explicit RangePerms(const std::vector<const authpb::Role*>& roles);

  // True when every key of [key, range_end) (the convention above) may be
  // accessed as `a`.
  bool permits(std::string_view key, std::string_view range_end, Access a) const;

 private:
  struct Interval {
    std::string begin;
    std::string end;  // exclusive; unbounded when `to_end`
    bool to_end = false;
  };
  static void add(std::vector<Interval>* set, const authpb::Permission& p);
  static void merge(std::vector<Interval>* set);
  static bool covers(const std::vector<Interval>& set, const Interval& want);

  std::vector<Interval> read_;
  std::vector<Interval> write_;
};

// etcd's isValidPermissionRange: a grant's range must be one key, from-key,
// or non-empty (key < range_end).
bool valid_permission_range(std::string_view key, std::string_view range_end);

}  // namespace etcdq::auth
