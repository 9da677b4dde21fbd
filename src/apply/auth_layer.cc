#include "apply/auth_layer.h"

#include "auth/request_checks.h"
#include "mvcc/range.h"

namespace etcdq::apply {

Error AuthLayer::check(const ApplyCtx& c) const {
  if (store_ == nullptr) return {};
  mvcc::Writer& w = c.w;
  return auth::check_command(*store_, c.cmd, [&w](int64_t lease) { return mvcc::keys_of_lease(w, lease); });
}

void AuthLayer::restored() {
  if (store_ != nullptr) store_->reload();
  next().restored();
}

Error AuthLayer::put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) {
  if (Error e = check(c)) return e;
  return next().put(c, r, resp);
}

Error AuthLayer::delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                              etcdserverpb::DeleteRangeResponse* resp) {
  if (Error e = check(c)) return e;
  return next().delete_range(c, r, resp);
}

Error AuthLayer::txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) {
  if (Error e = check(c)) return e;
  return next().txn(c, r, resp);
}

Error AuthLayer::compaction(ApplyCtx& c, const etcdserverpb::CompactionRequest& r,
                            etcdserverpb::CompactionResponse* resp, int64_t* wait_compaction) {
  if (Error e = check(c)) return e;
  return next().compaction(c, r, resp, wait_compaction);
}

Error AuthLayer::lease_grant(ApplyCtx& c, const etcdserverpb::LeaseGrantRequest& r,
                             etcdserverpb::LeaseGrantResponse* resp) {
  if (Error e = check(c)) return e;
  return next().lease_grant(c, r, resp);
}

Error AuthLayer::lease_revoke(ApplyCtx& c, const etcdserverpb::LeaseRevokeRequest& r,
                              etcdserverpb::LeaseRevokeResponse* resp) {
  if (Error e = check(c)) return e;
  return next().lease_revoke(c, r, resp);
}

Error AuthLayer::alarm(ApplyCtx& c, const etcdserverpb::AlarmRequest& r, etcdserverpb::AlarmResponse* resp) {
  if (Error e = check(c)) return e;
  return next().alarm(c, r, resp);
}

Error AuthLayer::auth_management(ApplyCtx& c) {
  if (store_ == nullptr) return next().auth_management(c);
  if (Error e = check(c)) return e;
  const Command& cmd = c.cmd;
  mvcc::Writer& w = c.w;
  switch (cmd.request_case()) {
    case Command::kAuthEnable: return store_->auth_enable(w);
    case Command::kAuthDisable: return store_->auth_disable(w);
    case Command::kUserAdd: return store_->user_add(w, cmd.user_add());
    case Command::kUserDelete: return store_->user_delete(w, cmd.user_delete());
    case Command::kUserChangePassword: return store_->user_change_password(w, cmd.user_change_password());
    case Command::kUserGrantRole: return store_->user_grant_role(w, cmd.user_grant_role());
    case Command::kUserRevokeRole: return store_->user_revoke_role(w, cmd.user_revoke_role());
    case Command::kRoleAdd: return store_->role_add(w, cmd.role_add());
    case Command::kRoleDelete: return store_->role_delete(w, cmd.role_delete());
    case Command::kRoleGrantPermission: return store_->role_grant_permission(w, cmd.role_grant_permission());
    case Command::kRoleRevokePermission: return store_->role_revoke_permission(w, cmd.role_revoke_permission());
    default: return errors::internal("not an auth command");
  }
}

}  // namespace etcdq::apply
