#include "member/auth.h"

#include "auth/bcrypt.h"
#include "mvcc/range.h"

namespace etcdq::member {

Error caller_of_token(const Context& ctx, std::string_view token, auth::Caller* out) {
  *out = {};
  if (ctx.auth == nullptr || !ctx.auth->enabled() || token.empty()) return {};
  std::string user;
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
  if (ctx.auth == nullptr) return {};
  auto view = ctx.store->view();
  return auth::check_command(*ctx.auth, cmd,
                             [&view](int64_t lease) { return mvcc::keys_of_lease(*view, lease); });
}

Error check_read(const Context& ctx, const auth::Caller& c, std::string_view key, std::string_view range_end) {
  if (ctx.auth == nullptr) return {};
  return ctx.auth->check_op(c.user, c.revision, key, range_end, auth::Access::kRead);
}

Error check_admin(const Context& ctx, const auth::Caller& c) {
  if (ctx.auth == nullptr) return {};
  return ctx.auth->check_admin(c.user);
}

Error require_user(const Context& ctx, const auth::Caller& c) {
  if (ctx.auth == nullptr || !ctx.auth->enabled()) return {};
  return c.user.empty() ? errors::user_empty() : Error();
}

Error authenticate(const Context& ctx, std::string_view user, std::string_view password, std::string* token) {
  if (ctx.auth == nullptr || ctx.tokens == nullptr) return errors::auth_not_enabled();
  uint64_t revision = 0;
  if (Error e = ctx.auth->check_password(user, password, &revision)) return e;
  authpb::User u;
  if (!ctx.auth->user(user, &u)) return errors::auth_failed();
  *token = ctx.tokens->assign(user, u.password(), ctx.node->progress().applied_index);
  return {};
}

Error hash_password(const Context& ctx, std::string_view password, std::string* hash) {
  return auth::bcrypt_hash(password, ctx.limits.bcrypt_cost, hash);
}

}  // namespace etcdq::member
