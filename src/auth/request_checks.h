// Which permission each request needs, as etcd checks them
// (server/etcdserver/apply/auth.go's checkPutAuth, checkTxnAuth,
// checkLeasePuts and v3_server.go's Range): one function per request kind,
// each asking Store::check_op for every key or range the request touches.
// Used twice, as etcd's rules demand: by the member before it proposes
// (member/auth.h, with the revision its token gave) and by the apply
// chain's auth layer on every member (apply/auth_layer.h), so a request
// admitted under an older auth state is refused when it is applied.
//
//   Range                 READ over [key, range_end)
//   Put                   WRITE on key; READ on key with prev_kv; WRITE on
//                         every key already attached to its lease
//   DeleteRange           WRITE over the range; READ too with prev_kv
//   Txn                   READ over every compare's range; each op of both
//                         branches as above, nested txns included
//   LeaseRevoke           WRITE on every key attached to the lease
//   Compaction, Alarm, auth management: the root role (Store::check_admin)
//
// Thread-safety: as Store's reads (any thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "auth/store.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcdq/command.pb.h"

namespace etcdq::auth {

// Who is asking: the user and the auth revision its token was checked at.
struct Caller {
  std::string user;
  uint64_t revision = 0;
};

// The keys attached to a lease (none for 0 or an unknown lease).
using LeaseKeys = std::function<std::vector<std::string>(int64_t lease)>;

Error check_range(const Store& s, const Caller& c, const etcdserverpb::RangeRequest& r);
Error check_put(const Store& s, const Caller& c, const etcdserverpb::PutRequest& r, const LeaseKeys& leases);
Error check_delete_range(const Store& s, const Caller& c, const etcdserverpb::DeleteRangeRequest& r);
Error check_txn(const Store& s, const Caller& c, const etcdserverpb::TxnRequest& r, const LeaseKeys& leases);
Error check_lease_revoke(const Store& s, const Caller& c, int64_t lease, const LeaseKeys& leases);

// Whether the command is auth management (needs the root role).
bool is_auth_management(const apply::Command& cmd);

// The whole rule for one command from the log, as the apply chain runs it:
// OK for internal commands and while auth is disabled; otherwise the rule
// of its kind, above. Member attributes and key-space plug-ins' decisions are
// always internal; LeaseGrant needs only a known user.
Error check_command(const Store& s, const apply::Command& cmd, const LeaseKeys& leases);

}  // namespace etcdq::auth
