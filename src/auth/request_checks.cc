#include "auth/request_checks.h"

namespace etcdq::auth {
namespace {

Error read(const Store& s, const Caller& c, std::string_view key, std::string_view end) {
  return s.check_op(c.user, c.revision, key, end, Access::kRead);
}
Error write(const Store& s, const Caller& c, std::string_view key, std::string_view end) {
  return s.check_op(c.user, c.revision, key, end, Access::kWrite);
}

}  // namespace

Error check_range(const Store& s, const Caller& c, const etcdserverpb::RangeRequest& r) {
  return read(s, c, r.key(), r.range_end());
}

Error check_lease_revoke(const Store& s, const Caller& c, int64_t lease, const LeaseKeys& leases) {
  if (lease == 0 || !leases) return {};
  for (const std::string& k : leases(lease)) {
    if (Error e = write(s, c, k, "")) return e;
  }
  return {};
}

Error check_put(const Store& s, const Caller& c, const etcdserverpb::PutRequest& r, const LeaseKeys& leases) {
  if (Error e = write(s, c, r.key(), "")) return e;
  // A lease already holding a key this user may not write cannot be
  // revoked by this user, so nothing new may be attached to it (etcd).
  if (Error e = check_lease_revoke(s, c, r.lease(), leases)) return e;
  if (r.prev_kv()) return read(s, c, r.key(), "");
  return {};
}

Error check_delete_range(const Store& s, const Caller& c, const etcdserverpb::DeleteRangeRequest& r) {
  if (Error e = write(s, c, r.key(), r.range_end())) return e;
  if (r.prev_kv()) return read(s, c, r.key(), r.range_end());
  return {};
}

Error check_txn(const Store& s, const Caller& c, const etcdserverpb::TxnRequest& r, const LeaseKeys& leases) {
  for (const auto& cmp : r.compare()) {
    if (Error e = read(s, c, cmp.key(), cmp.range_end())) return e;
  }
  for (const auto* ops : {&r.success(), &r.failure()}) {
    for (const auto& op : *ops) {
      Error e;
      if (op.has_request_range()) {
        e = check_range(s, c, op.request_range());
      } else if (op.has_request_put()) {
        e = check_put(s, c, op.request_put(), leases);
      } else if (op.has_request_delete_range()) {
        e = check_delete_range(s, c, op.request_delete_range());
      } else if (op.has_request_txn()) {
        e = check_txn(s, c, op.request_txn(), leases);
      }
      if (e) return e;
    }
  }
  return {};
}

bool is_auth_management(const apply::Command& cmd) {
  switch (cmd.request_case()) {
    case apply::Command::kAuthEnable:
    case apply::Command::kAuthDisable:
    case apply::Command::kUserAdd:
    case apply::Command::kUserDelete:
    case apply::Command::kUserChangePassword:
    case apply::Command::kUserGrantRole:
    case apply::Command::kUserRevokeRole:
    case apply::Command::kRoleAdd:
    case apply::Command::kRoleDelete:
    case apply::Command::kRoleGrantPermission:
    case apply::Command::kRoleRevokePermission:
      return true;
    default:
      return false;
  }
}

Error check_command(const Store& s, const apply::Command& cmd, const LeaseKeys& leases) {
  if (cmd.internal() || !s.enabled()) return {};
  Caller c{cmd.auth_user(), cmd.auth_revision()};
  if (is_auth_management(cmd)) return s.check_admin(c.user);
  switch (cmd.request_case()) {
    case apply::Command::kPut:
      return check_put(s, c, cmd.put(), leases);
    case apply::Command::kDeleteRange:
      return check_delete_range(s, c, cmd.delete_range());
    case apply::Command::kTxn:
      return check_txn(s, c, cmd.txn(), leases);
    case apply::Command::kLeaseRevoke:
      return check_lease_revoke(s, c, cmd.lease_revoke().id(), leases);
    case apply::Command::kAlarm:
      // etcd's authMaintenanceServer: listing alarms needs a user only.
      if (cmd.alarm().action() == etcdserverpb::AlarmRequest::GET) {
        return c.user.empty() ? errors::user_empty() : Error();
      }
      return s.check_admin(c.user);
    case apply::Command::kCompaction:
      return s.check_admin(c.user);
    case apply::Command::kLeaseGrant:
      return c.user.empty() ? errors::user_empty() : Error();
    case apply::Command::kMemberAttributes:
      return {};
    default:
      return {};
  }
}

}  // namespace etcdq::auth
