#include "apply/command_check.h"

#include <cstring>

#include "apply/entry.h"
#include "apply/validate.h"
#include "auth/store.h"
#include "keyspace/registry.h"
#include "lease/lessor.h"

namespace etcdq::apply {
namespace {

// A member's name and client URLs, as published; far above any real one.
constexpr size_t kMaxNameBytes = 1024;
constexpr int kMaxClientUrls = 64;
constexpr size_t kMaxUrlBytes = 1024;

Error malformed(const std::string& why) {
  return Error(Code::kInvalidArgument, "etcdserver: malformed command: " + why);
}

Error check_alarm(const etcdserverpb::AlarmRequest& r) {
  if (!etcdserverpb::AlarmRequest_AlarmAction_IsValid(r.action())) return malformed("unknown alarm action");
  if (!etcdserverpb::AlarmType_IsValid(r.alarm())) return malformed("unknown alarm type");
  return {};
}

Error check_member_attributes(const MemberAttributes& a) {
  if (a.id() == 0) return malformed("member attributes without a member id");
  if (a.name().size() > kMaxNameBytes) return malformed("member name too long");
  if (a.client_urls_size() > kMaxClientUrls) return malformed("too many client URLs");
  for (const auto& u : a.client_urls()) {
    if (u.size() > kMaxUrlBytes || (u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0 &&
                                    u.rfind("unix://", 0) != 0 && u.rfind("unixs://", 0) != 0)) {
      return malformed("bad client URL");
    }
  }
  return {};
}

}  // namespace

Error check_command(const Command& cmd, const CommandLimits& limits, bool forwarded) {
  switch (cmd.request_case()) {
    case Command::kPut: return validate_put(cmd.put());
    case Command::kDeleteRange: return validate_delete_range(cmd.delete_range());
    case Command::kTxn: return validate_txn(cmd.txn(), limits.max_txn_ops);
    case Command::kCompaction: return {};  // apply answers etcd's compacted / future errors
    case Command::kLeaseGrant:
      if (cmd.lease_grant().id() == 0) return malformed("lease grant without an id");
      if (cmd.lease_grant().ttl() > lease::kMaxLeaseTtlSeconds) return errors::lease_ttl_too_large();
      return {};
    case Command::kLeaseRevoke: return {};  // an unknown lease is apply's lease_not_found()
    case Command::kAlarm: return check_alarm(cmd.alarm());
    case Command::kMemberAttributes: return check_member_attributes(cmd.member_attributes());
    // Auth management (auth/store.h): the proposer hashed the password;
    // a clear one must never reach the log.
    case Command::kUserAdd:
      if (!cmd.user_add().password().empty()) return malformed("a clear password in a user add");
      if (cmd.user_add().name().size() > auth::kMaxNameBytes) return auth::name_too_long("user");
      return {};
    case Command::kUserChangePassword:
      if (!cmd.user_change_password().password().empty()) return malformed("a clear password in a password change");
      return {};
    case Command::kAuthEnable:
    case Command::kAuthDisable:
    case Command::kUserDelete:
    case Command::kUserGrantRole:
    case Command::kUserRevokeRole:
      return {};
    case Command::kRoleAdd:
      if (cmd.role_add().name().size() > auth::kMaxNameBytes) return auth::name_too_long("role");
      return {};
    case Command::kRoleDelete:
    case Command::kRoleGrantPermission:
    case Command::kRoleRevokePermission:
      return {};
    case Command::REQUEST_NOT_SET: return malformed("no request");
    default: break;
  }
  // A key-space plug-in's own command (keyspace/kind.h, check_command).
  if (const keyspace::Kind* k = keyspace::command_owner(cmd)) {
    std::string why = k->check_command(cmd, forwarded);
    return why.empty() ? Error() : malformed(why);
  }
  return malformed("no request");
}

Error decode_forwarded(const std::string& framed, Command* out) {
  // One well-formed frame (apply/entry.h), decoded exactly as apply will.
  if (!well_framed_command(framed)) return malformed("not exactly one well-formed frame");
  if (!decode_command(std::string_view(framed).substr(4), out)) return malformed("undecodable");
  return {};
}

}  // namespace etcdq::apply
