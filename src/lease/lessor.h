// Leases, as etcd's lessor defines them (server/lease/lessor.go): a lease
// has an id and a TTL in seconds; keys attached to it are deleted, in one
// revision, when it is revoked or expires.
//
// Two halves with different owners:
// - the lease table (id -> granted TTL) is replicated state: it changes
//   only in apply, in the same RocksDB batch as the entry (storage: the
//   meta column family under "lease/"), and is reloaded at start;
// - expiry clocks are local to the leader and never consulted by apply:
//   the leader proposes a revoke for a lease whose clock ran out. At start
//   (and so after a leader change) every clock restarts at its full TTL, so
//   a lease never expires earlier than its TTL after a new leader takes
//   over (etcd's Promote).
//
// Counts grants and revokes applied and renewals (keep-alives this member
// served as leader) in etcd_debugging_lease_{granted,revoked,renewed}_total
// (common/metrics.h).
//
// Which keys a lease holds is the MVCC store's index (mvcc/writer.h).
//
// Thread-safety: all methods may be called from any thread; the table is
// written only by the apply thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "mvcc/writer.h"
#include "storage/engine.h"

namespace etcdq::lease {

using Clock = std::chrono::steady_clock;

// etcd's limits: the largest TTL a client may ask for (MaxLeaseTTL), and the
// smallest one granted, 1.5 election timeouts rounded up to whole seconds.
inline constexpr int64_t kMaxLeaseTtlSeconds = 9000000000LL;
int64_t min_ttl_seconds(unsigned election_timeout_ms);

class Lessor {
 public:
  Lessor(storage::Engine* engine, int64_t min_ttl_seconds);

  // --- apply thread: replicated changes, written through `w` ---
  // Errors: lease_exist() when `id` is granted already,
  // lease_ttl_too_large() above kMaxLeaseTtlSeconds.
  Error grant(mvcc::Writer& w, int64_t id, int64_t ttl_seconds, int64_t* granted_ttl);
  // Deletes every key attached to `id` (one revision, if any) and the
  // lease. Errors: lease_not_found().
  Error revoke(mvcc::Writer& w, int64_t id);

  // --- anyone ---
  bool exists(int64_t id) const;
  // Restarts the clock of `id`; returns its TTL, or 0 if it does not exist
  // (what etcd's keep-alive answers for an unknown lease).
  int64_t renew(int64_t id);
  struct Info {
    int64_t granted_ttl = 0;
    int64_t remaining_seconds = 0;
  };
  std::optional<Info> info(int64_t id) const;
  std::vector<int64_t> ids() const;
  // Leases whose clock ran out, oldest first, at most `max`.
  std::vector<int64_t> expired(Clock::time_point now, size_t max) const;
  // Reloads the table from the database (a snapshot restore replaced it);
  // every clock starts at its full TTL.
  void reload();
  // Restarts every clock (this member became leader).
  void restart_clocks();
  int64_t min_ttl() const { return min_ttl_; }

 private:
  struct Lease {
    int64_t ttl;
    Clock::time_point expiry;
  };
  storage::Engine* engine_;
  int64_t min_ttl_;
  mutable std::mutex mu_;
  std::unordered_map<int64_t, Lease> leases_;
};

}  // namespace etcdq::lease
