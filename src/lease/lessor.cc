#include "lease/lessor.h"

#include <algorithm>

#include "common/metrics.h"
#include "mvcc/codec.h"
#include "mvcc/range.h"

namespace etcdq::lease {

int64_t min_ttl_seconds(unsigned election_timeout_ms) {
  // etcd: (3 * electionTicks / 2) heartbeats, rounded up to a second; with
  // ticks of one heartbeat that is 1.5 election timeouts.
  int64_t ms = 3 * static_cast<int64_t>(election_timeout_ms) / 2;
  return (ms + 999) / 1000;
}

namespace {
// etcd 3.4's lease counters (etcd's server/lease/metrics.go).
prometheus::Counter& granted_total() {
  static prometheus::Counter& c =
      metrics::counter("etcd_debugging_lease_granted_total", "The total number of granted leases.");
  return c;
}
prometheus::Counter& revoked_total() {
  static prometheus::Counter& c =
      metrics::counter("etcd_debugging_lease_revoked_total", "The total number of revoked leases.");
  return c;
}
prometheus::Counter& renewed_total() {
  static prometheus::Counter& c =
      metrics::counter("etcd_debugging_lease_renewed_total", "The number of renewed leases seen by the leader.");
  return c;
}
// The TTL each grant applied with (after --min-lease-ttl's raise), as
// etcd's lessor Grant observes it.
prometheus::Histogram& granted_ttl_seconds() {
  static prometheus::Histogram& h = metrics::histogram(
      "etcd_debugging_lease_ttl_total", "Bucketed histogram of lease TTLs.", metrics::exponential_buckets(1, 2, 24));
  return h;
}
}  // namespace

Lessor::Lessor(storage::Engine* engine, int64_t min_ttl) : engine_(engine), min_ttl_(min_ttl) {
  // Shown at 0 from the start, as etcd's.
  granted_total();
  revoked_total();
  renewed_total();
  granted_ttl_seconds();
  reload();
}

void Lessor::reload() {
  std::unordered_map<int64_t, Lease> table;
  storage::Iterator it = engine_->iterator(storage::Cf::kMeta);
  auto now = Clock::now();
  std::string prefix(mvcc::kLeaseTablePrefix);
  for (it.seek(prefix); it.valid() && it.key().starts_with(prefix); it.next()) {
    if (it.key().size() != prefix.size() + 8) continue;
    uint64_t id = 0;
    for (size_t i = 0; i < 8; ++i) id = (id << 8) | static_cast<uint8_t>(it.key()[prefix.size() + i]);
    // Within what grant() stores, so that the expiry below cannot overflow.
    int64_t ttl = std::clamp<int64_t>(mvcc::decode_i64(it.value()), 0, kMaxLeaseTtlSeconds);
    table[static_cast<int64_t>(id)] = Lease{ttl, now + std::chrono::seconds(ttl)};
  }
  std::lock_guard<std::mutex> lock(mu_);
  leases_ = std::move(table);
}


Error Lessor::grant(mvcc::Writer& w, int64_t id, int64_t ttl, int64_t* granted_ttl) {
  // The client API refuses this already (lease_service.cc); apply checks
  // it again because a log entry is not a client request (a forwarded or
  // damaged command), and a larger TTL overflows the expiry clock.
  if (ttl > kMaxLeaseTtlSeconds) return errors::lease_ttl_too_large();
  ttl = std::max(ttl, min_ttl_);
  std::lock_guard<std::mutex> lock(mu_);
  if (leases_.count(id)) return errors::lease_exist();
  w.put_meta(mvcc::lease_table_key(id), mvcc::encode_i64(ttl));
  leases_[id] = Lease{ttl, Clock::now() + std::chrono::seconds(ttl)};
  *granted_ttl = ttl;
  granted_total().Increment();
  granted_ttl_seconds().Observe(static_cast<double>(ttl));
  return {};
}

Error Lessor::revoke(mvcc::Writer& w, int64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!leases_.count(id)) return errors::lease_not_found();
  }
  // All attached keys go in one revision, in key order (etcd's Revoke).
  w.begin();
  for (const auto& key : mvcc::keys_of_lease(w, id)) w.delete_range(key, "", nullptr);
  w.end();
  w.delete_meta(mvcc::lease_table_key(id));
  std::lock_guard<std::mutex> lock(mu_);
  leases_.erase(id);
  revoked_total().Increment();
  return {};
}

bool Lessor::exists(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_.count(id) > 0;
}

int64_t Lessor::renew(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return 0;
  it->second.expiry = Clock::now() + std::chrono::seconds(it->second.ttl);
  renewed_total().Increment();
  return it->second.ttl;
}

std::optional<Lessor::Info> Lessor::info(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return std::nullopt;
  auto left = std::chrono::duration_cast<std::chrono::seconds>(it->second.expiry - Clock::now()).count();
  return Info{it->second.ttl, std::max<int64_t>(left, 0)};
}

std::vector<int64_t> Lessor::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> out;
  out.reserve(leases_.size());
  for (const auto& [id, l] : leases_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> Lessor::expired(Clock::time_point now, size_t max) const {
  std::vector<std::pair<Clock::time_point, int64_t>> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, l] : leases_) {
      if (l.expiry <= now) due.emplace_back(l.expiry, id);
    }
  }
  std::sort(due.begin(), due.end());
  std::vector<int64_t> out;
  for (size_t i = 0; i < due.size() && i < max; ++i) out.push_back(due[i].second);
  return out;
}

void Lessor::restart_clocks() {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  for (auto& [id, l] : leases_) l.expiry = now + std::chrono::seconds(l.ttl);
}

}  // namespace etcdq::lease
