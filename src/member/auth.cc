#include "member/auth.h"

#include <algorithm>

#include "auth/bcrypt.h"
#include "mvcc/range.h"

namespace etcdq::member {

bool auth_enabled(const Context& ctx) { return ctx.auth != nullptr && ctx.auth->enabled(); }

uint64_t auth_revision(const Context& ctx) { return ctx.auth == nullptr ? 0 : ctx.auth->revision(); }

Error caller_of_token(const Context& ctx, std::string_view token, auth::Caller* out) {
  *out = {};
  if (ctx.auth == nullptr || !ctx.auth->enabled() || token.empty()) return {};
  std::string user;
  if (ctx.jwt != nullptr) {
    // etcd's tokenJWT.info: the claims are the caller; the revision is the
    // one the password was checked at, so a later auth change makes
    // requests with this token fail with auth_old_revision() (clients
    // re-authenticate), and a deleted user is refused as unknown.
    uint64_t revision = 0;
    if (!ctx.jwt->info(token, &user, &revision)) return errors::invalid_auth_token();
    out->user = std::move(user);
    out->revision = revision;
    return {};
  }
  std::string hash;
  if (ctx.tokens == nullptr || !ctx.tokens->lookup(token, &user, &hash)) return errors::invalid_auth_token();
  authpb::User u;
  if (!ctx.auth->user(user, &u) || u.password() != hash) {
    ctx.tokens->invalidate(token);
    return errors::invalid_auth_token();
  }
  // A simple token carries no revision: the store's current one (etcd's
  // simpleTokenTTLKeeper info). The apply chain compares it again.
  out->user = std::move(user);
  out->revision = ctx.auth->revision();
  return {};
}

Error caller_of_cert_common_name(const Context& ctx, std::string_view common_name, auth::Caller* out) {
  *out = {};
  if (ctx.auth == nullptr || !ctx.auth->enabled() || common_name.empty()) return {};
  out->user = std::string(common_name);
  out->revision = ctx.auth->revision();
  return {};
}

void stamp(apply::Command* cmd, const auth::Caller& c) {
  if (c.user.empty()) return;
  cmd->set_auth_user(c.user);
  cmd->set_auth_revision(c.revision);
}

Error check_permission(const Context& ctx, const apply::Command& cmd) {
  // Auth off (the common case) needs no store view; the apply chain's
  // auth layer decides again at the entry's own revision.
  if (ctx.auth == nullptr || !ctx.auth->enabled()) return {};
  auto view = ctx.store->view();
  return auth::check_command(*ctx.auth, cmd,
                             [&view](int64_t lease) { return mvcc::keys_of_lease(*view, lease); });
}

Error check_read(const Context& ctx, const auth::Caller& c, std::string_view key, std::string_view range_end) {
  if (ctx.auth == nullptr) return {};
  return ctx.auth->check_op(c.user, c.revision, key, range_end, auth::Access::kRead);
}

Error check_range(const Context& ctx, const auth::Caller& c, const etcdserverpb::RangeRequest& r) {
  if (ctx.auth == nullptr) return {};
  return auth::check_range(*ctx.auth, c, r);
}

Error check_read_txn(const Context& ctx, const auth::Caller& c, const etcdserverpb::TxnRequest& r) {
  if (ctx.auth == nullptr) return {};
  return auth::check_txn(*ctx.auth, c, r, nullptr);
}

Error check_read_write(const Context& ctx, const auth::Caller& c, std::string_view key, std::string_view range_end) {
  if (Error e = check_read(ctx, c, key, range_end)) return e;
  if (ctx.auth == nullptr) return {};
  return ctx.auth->check_op(c.user, c.revision, key, range_end, auth::Access::kWrite);
}

Error check_admin(const Context& ctx, const auth::Caller& c) {
  if (ctx.auth == nullptr) return {};
  return ctx.auth->check_admin(c.user);
}

Error require_user(const Context& ctx, const auth::Caller& c) {
  if (ctx.auth == nullptr || !ctx.auth->enabled()) return {};
  return c.user.empty() ? errors::user_empty() : Error();
}

Error check_lease_time_to_live(const Context& ctx, const auth::Caller& c, int64_t lease, bool keys) {
  if (Error e = require_user(ctx, c)) return e;
  if (!keys || !check_admin(ctx, c)) return {};
  auto view = ctx.store->view();
  for (const auto& k : mvcc::keys_of_lease(*view, lease)) {
    if (Error e = check_read(ctx, c, k, "")) return e;
  }
  return {};
}

Error check_lease_renew(const Context& ctx, const auth::Caller& c, int64_t lease) {
  if (ctx.auth == nullptr || !ctx.auth->enabled()) return {};
  if (Error e = require_user(ctx, c)) return e;
  if (!check_admin(ctx, c)) return {};
  auto view = ctx.store->view();
  for (const auto& k : mvcc::keys_of_lease(*view, lease)) {
    if (Error e = ctx.auth->check_op(c.user, c.revision, k, "", auth::Access::kWrite)) return e;
  }
  return {};
}

Error authenticate(const Context& ctx, std::string_view user, std::string_view password, std::string* token) {
  if (ctx.auth == nullptr || (ctx.tokens == nullptr && ctx.jwt == nullptr)) return errors::auth_not_enabled();
  uint64_t revision = 0;
  if (Error e = ctx.auth->check_password(user, password, &revision)) return e;
  if (ctx.jwt != nullptr) return ctx.jwt->assign(user, revision, token);
  authpb::User u;
  if (!ctx.auth->user(user, &u)) return errors::auth_failed();
  *token = ctx.tokens->assign(user, u.password(), ctx.node->progress().applied_index);
  return {};
}

void disable_tokens(Context& ctx) {
  if (ctx.tokens) ctx.tokens->disable_all();
}

void auth_status(const Context& ctx, etcdserverpb::AuthStatusResponse* resp) {
  resp->set_enabled(ctx.auth->enabled());
  resp->set_authrevision(ctx.auth->revision());
}

Error user_get(const Context& ctx, const etcdserverpb::AuthUserGetRequest& r, etcdserverpb::AuthUserGetResponse* resp) {
  return ctx.auth->user_get(r, resp);
}

void user_list(const Context& ctx, etcdserverpb::AuthUserListResponse* resp) { ctx.auth->user_list(resp); }

Error role_get(const Context& ctx, const etcdserverpb::AuthRoleGetRequest& r, etcdserverpb::AuthRoleGetResponse* resp) {
  return ctx.auth->role_get(r, resp);
}

void role_list(const Context& ctx, etcdserverpb::AuthRoleListResponse* resp) { ctx.auth->role_list(resp); }

bool has_role(const Context& ctx, std::string_view user, std::string_view role) {
  authpb::User u;
  if (!ctx.auth->user(user, &u)) return false;
  return std::find(u.roles().begin(), u.roles().end(), role) != u.roles().end();
}

Error hash_password(const Context& ctx, std::string_view password, std::string* hash) {
  return auth::bcrypt_hash(password, ctx.limits.bcrypt_cost, hash);
}

}  // namespace etcdq::member
