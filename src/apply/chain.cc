#include "apply/chain.h"

#include "keyspace/registry.h"

namespace etcdq::apply {
namespace {

// The ops that write keys share one main revision (etcd's txn write).
template <typename Fn>
Error in_txn(mvcc::Writer& w, Fn fn) {
  w.begin();
  Error e = fn();
  w.end();
  return e;
}

}  // namespace

void run(Layer& head, ApplyCtx& c, Result* out) {
  const Command& cmd = c.cmd;
  switch (cmd.request_case()) {
    case Command::kPut: {
      etcdserverpb::PutResponse resp;
      out->error = in_txn(c.w, [&] { return head.put(c, cmd.put(), &resp); });
      out->response = std::move(resp);
      break;
    }
    case Command::kDeleteRange: {
      etcdserverpb::DeleteRangeResponse resp;
      out->error = in_txn(c.w, [&] { return head.delete_range(c, cmd.delete_range(), &resp); });
      out->response = std::move(resp);
      break;
    }
    case Command::kTxn: {
      etcdserverpb::TxnResponse resp;
      out->error = in_txn(c.w, [&] { return head.txn(c, cmd.txn(), &resp); });
      out->response = std::move(resp);
      break;
    }
    case Command::kCompaction: {
      etcdserverpb::CompactionResponse resp;
      out->error = head.compaction(c, cmd.compaction(), &resp, &out->wait_compaction);
      out->response = std::move(resp);
      break;
    }
    case Command::kLeaseGrant: {
      etcdserverpb::LeaseGrantResponse resp;
      out->error = head.lease_grant(c, cmd.lease_grant(), &resp);
      out->response = std::move(resp);
      break;
    }
    case Command::kLeaseRevoke: {
      etcdserverpb::LeaseRevokeResponse resp;
      out->error = head.lease_revoke(c, cmd.lease_revoke(), &resp);
      out->response = std::move(resp);
      break;
    }
    case Command::kAlarm: {
      etcdserverpb::AlarmResponse resp;
      out->error = head.alarm(c, cmd.alarm(), &resp);
      out->response = std::move(resp);
      break;
    }
    case Command::kMemberAttributes:
      out->error = head.member_attributes(c, cmd.member_attributes());
      break;
    case Command::kAuthEnable:
    case Command::kAuthDisable:
    case Command::kUserAdd:
    case Command::kUserDelete:
    case Command::kUserChangePassword:
    case Command::kUserGrantRole:
    case Command::kUserRevokeRole:
    case Command::kRoleAdd:
    case Command::kRoleDelete:
    case Command::kRoleGrantPermission:
    case Command::kRoleRevokePermission:
      out->error = head.auth_management(c);
      break;
    default:
      // A key-space plug-in's own command (keyspace/registry.h): written
      // like the KV ops, in one txn.
      if (keyspace::command_owner(cmd) != nullptr) {
        out->error = in_txn(c.w, [&] { return head.plugin_command(c); });
      } else {
        out->error = errors::internal("unknown command in the log");
      }
      break;
  }
}

}  // namespace etcdq::apply
