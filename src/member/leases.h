// The member's lease calls as the Lease service and the peer server need
// them, shaped like etcd's Lessor side of EtcdServer
// (server/etcdserver/v3_server.go: LeaseGrant's id, LeaseRenew,
// LeaseTimeToLive, LeaseLeases). Grant and Revoke themselves are commands
// through the pipeline (member/answers.h); the clocks behind renew() and
// time_to_live() are the leader's (lease/lessor.h), so a follower forwards
// those calls instead of answering them.
//
// Units: TTLs in seconds; lease ids as etcd's (int64, 0 = none).
// Thread-safety: any thread (the lessor's own lock).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "lease/lessor.h"
#include "member/context.h"

namespace etcdq::member::leases {

// etcd's MaxLeaseTTL: a LeaseGrant asking more fails with
// errors::lease_ttl_too_large() before it is proposed.
inline constexpr int64_t kMaxTtlSeconds = lease::kMaxLeaseTtlSeconds;

// An id for a LeaseGrant that asked for none (etcd's reqIDGen, its top bit
// cleared): from this member's generator, skipping ids in use.
int64_t next_id(Context& ctx);

// The leader's renewal (etcd's LeaseRenew on the leader): restarts the
// lease's clock; its TTL, 0 for an unknown lease (what a keep-alive answers).
int64_t renew(Context& ctx, int64_t id);

// A follower's renewal: the leader renews (its Peer service, over the peer
// URL, member/leader.h) and `done` gets the TTL (0: unknown lease) or the
// error: errors::no_leader() at once when no leader is known, else the
// forwarded call's (consensus/forwarder.h). `done` runs once, on this
// thread for no_leader, else on a gRPC thread.
void renew_at_leader(Context& ctx, int64_t id, std::function<void(Error, int64_t ttl)> done);

// Every lease id, as LeaseLeases lists them.
std::vector<int64_t> ids(const Context& ctx);

// The leader's answer to LeaseTimeToLive (its lease clock), checks done by
// the caller (member/auth.h check_lease_time_to_live): TTL -1 for an
// unknown lease, as etcd; the keys attached when req.keys(); `resp`'s
// header filled.
void time_to_live(const Context& ctx, const etcdserverpb::LeaseTimeToLiveRequest& req,
                  etcdserverpb::LeaseTimeToLiveResponse* resp);

}  // namespace etcdq::member::leases
