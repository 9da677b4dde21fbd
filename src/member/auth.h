// Authentication on this member (etcd's AuthInfoFromCtx, v3_server.go's
// Authenticate and its password hashing) and the pipeline's permission
// check (pipeline.h, step 4). The auth state itself is replicated
// (auth/store.h); tokens are this member's (auth/simple_tokens.h).
//
// Thread-safety: any thread.
#pragma once

#include <string>
#include <string_view>

#include "auth/request_checks.h"
#include "common/error.h"
#include "etcdq/command.pb.h"
#include "member/context.h"

namespace etcdq::member {

// Who makes a request: a user and the auth revision its token was checked
// at (auth/request_checks.h); what the services resolve and hand down.
using Caller = auth::Caller;

// Whether auth is on (etcd's AuthStore.IsAuthEnabled): off, nothing below
// checks anything and callers need not be resolved.
bool auth_enabled(const Context& ctx);
// The auth store's revision now (etcd's AuthStore.Revision): bumped by
// every auth change; a caller checked at an older one is stale. 0: auth
// never configured.
uint64_t auth_revision(const Context& ctx);

// The caller a request's token names. No token: an empty caller (refused
// later with errors::user_empty() where a permission is needed). Auth
// disabled: an empty caller, whatever the token. A token that is unknown,
// expired, or whose user was deleted or changed password since:
// errors::invalid_auth_token().
Error caller_of_token(const Context& ctx, std::string_view token, auth::Caller* out);

// Hook for TLS client-certificate login (--client-cert-auth: etcd uses the
// verified certificate's Common Name as the user, with no password and the
// current auth revision). The TLS work fills `common_name` from the
// verified peer certificate; until then nothing calls this.
Error caller_of_cert_common_name(const Context& ctx, std::string_view common_name, auth::Caller* out);

// Marks `cmd` as asked by `c` (Command.auth_user, auth_revision).
void stamp(apply::Command* cmd, const auth::Caller& c);

// The pipeline's step 4: the command's permission as auth/request_checks.h
// says, with the revision it was stamped with; internal commands pass.
Error check_permission(const Context& ctx, const apply::Command& cmd);

// Reads served without the log, checked before serving (etcd's Range,
// Watch, read-only Txn, LeaseTimeToLive with keys).
Error check_read(const Context& ctx, const auth::Caller& c, std::string_view key, std::string_view range_end);
// etcd's Range check (auth/request_checks.h check_range) and the one of a
// read-only Txn (every key it reads), served without the log.
Error check_range(const Context& ctx, const auth::Caller& c, const etcdserverpb::RangeRequest& r);
Error check_read_txn(const Context& ctx, const auth::Caller& c, const etcdserverpb::TxnRequest& r);
// READ and WRITE over [key, range_end): the Lock and Election recipes,
// checked once on entry for every key they may touch.
Error check_read_write(const Context& ctx, const auth::Caller& c, std::string_view key, std::string_view range_end);
// etcd's IsAdminPermitted (root role) for Defragment, Snapshot, Hash,
// MoveLeader, member changes, ...
Error check_admin(const Context& ctx, const auth::Caller& c);
// etcd's requireAuthInfo (Status, Alarm GET): a user, any permission.
Error require_user(const Context& ctx, const auth::Caller& c);

// etcd 3.5's LeaseTimeToLive checks (v3_server.go: requireAuthInfo, and
// with `keys` checkLeaseTimeToLive): a user; with keys, root or READ on
// every key attached to `lease`.
Error check_lease_time_to_live(const Context& ctx, const auth::Caller& c, int64_t lease, bool keys);
// etcd 3.5's checkLeaseRenew (v3_server.go, since 3.5.28), for each
// LeaseKeepAlive request: a user; root, or WRITE on every key attached to
// `lease` (an unknown lease has none).
Error check_lease_renew(const Context& ctx, const auth::Caller& c, int64_t lease);

// etcd's Authenticate: checks the password (bcrypt, slow: a gRPC thread
// runs it, never the consensus thread) and issues a token on this member.
// Errors: auth_not_enabled(), auth_failed().
Error authenticate(const Context& ctx, std::string_view user, std::string_view password, std::string* token);

// AuthDisable's effect on this member (etcd's tokenProvider.disable()):
// every simple token it issued dies. JWTs stay valid by their signature
// but auth is off, so nothing asks for them.
void disable_tokens(Context& ctx);

// The replicated auth state's reads (etcd's AuthStatus, UserGet, UserList,
// RoleGet, RoleList), served after member/reads.h when_readable; the
// permission checks are the caller's (check_admin, has_role). user_get and
// role_get: the auth store's errors for an unknown user or role
// (auth/store.h).
void auth_status(const Context& ctx, etcdserverpb::AuthStatusResponse* resp);
Error user_get(const Context& ctx, const etcdserverpb::AuthUserGetRequest& r, etcdserverpb::AuthUserGetResponse* resp);
void user_list(const Context& ctx, etcdserverpb::AuthUserListResponse* resp);
Error role_get(const Context& ctx, const etcdserverpb::AuthRoleGetRequest& r, etcdserverpb::AuthRoleGetResponse* resp);
void role_list(const Context& ctx, etcdserverpb::AuthRoleListResponse* resp);
// Whether `user` exists and has `role` (etcd lets a user read its own roles).
bool has_role(const Context& ctx, std::string_view user, std::string_view role);

// Hashes `password` at ctx's --bcrypt-cost before a UserAdd or
// UserChangePassword is proposed (the log carries only the hash).
Error hash_password(const Context& ctx, std::string_view password, std::string* hash);

}  // namespace etcdq::member
