#include "apply/applier.h"

#include <spdlog/spdlog.h>

#include "apply/entry.h"
#include "apply/validate.h"
#include "etcdq/command.pb.h"

namespace etcdq::apply {

Applier::Applier(mvcc::Store* store, lease::Lessor* lessor, Alarms* alarms, Members* members,
                 queue::Book* queues)
    : store_(store),
      lessor_(lessor),
      alarms_(alarms),
      members_(members),
      queues_(queues),
      applied_index_(store->view()->applied_index()),
      leases_([lessor](int64_t id) { return lessor->exists(id); }) {}

Error Applier::apply(uint64_t index, std::string_view payload, std::vector<Result>* results) {
  if (index <= applied_index_) return {};  // applied before a restart
  mvcc::Writer w(store_);
  queue::Book* queues = queues_;
  w.set_delete_tap([queues](mvcc::Writer& wr, std::string_view key) {
    if (key.starts_with("/q/")) queues->deleted(wr, key);
  });
  std::string_view rest = payload;
  std::string_view bytes;
  bool corrupt = false;
  while (next_framed(&rest, &bytes, &corrupt)) {
    results->emplace_back();
    apply_command(w, bytes, &results->back());
  }
  if (corrupt) {
    // libraft checksums entries, so a bad frame came from its proposer (a
    // peer with a bad build): every member skips the rest of the entry the
    // same way, which keeps them equal; stopping would stop them all, for
    // good, since the entry is committed.
    spdlog::error("log entry {} has a badly framed command: skipping the rest of the entry", index);
  }
  queues_->before_commit(w);
  if (Error e = w.commit(index)) return e;
  applied_index_ = index;
  queues_->committed(w.revision());
  return {};
}

// etcd's capped and corrupt appliers: what an active alarm refuses.
Error Applier::capped(const Command& cmd) const {
  if (cmd.has_member_attributes()) return {};  // membership is not the key space's
  bool writes = cmd.has_put() || cmd.has_lease_grant() || (cmd.has_txn() && !txn_is_read_only(cmd.txn()));
  if (alarms_->active(etcdserverpb::CORRUPT) && !cmd.has_alarm()) return errors::corrupt();
  if (alarms_->active(etcdserverpb::NOSPACE) && writes) return errors::no_space();
  return {};
}

Error Applier::apply_noop(uint64_t index) {
  if (index <= applied_index_) return {};
  mvcc::Writer w(store_);
  if (Error e = w.commit(index)) return e;
  applied_index_ = index;
  return {};
}

void Applier::apply_command(mvcc::Writer& w, std::string_view bytes, Result* out) {
  Command cmd;
  if (!decode_command(bytes, &cmd)) {
    out->error = errors::internal("undecodable command in the log");
    spdlog::error("skipping an undecodable command ({} bytes)", bytes.size());
    return;
  }
  out->origin = cmd.origin();
  out->proposal_id = cmd.proposal_id();
  if (Error e = capped(cmd)) {
    out->error = e;
    return;
  }
  w.begin();
  Env env{leases_, queues_, cmd.time_ms()};
  switch (cmd.request_case()) {
    case Command::kPut: {
      const auto& r = cmd.put();
      etcdserverpb::PutResponse resp;
      if (r.lease() != 0 && !leases_(r.lease())) {
        out->error = errors::lease_not_found();
      } else {
        out->error = put(w, r, env, &resp);
      }
      w.end();
      out->response = std::move(resp);
      break;
    }
    case Command::kDeleteRange: {
      etcdserverpb::DeleteRangeResponse resp;
      out->error = delete_range(w, cmd.delete_range(), &resp);
      w.end();
      out->response = std::move(resp);
      break;
    }
    case Command::kTxn: {
      etcdserverpb::TxnResponse resp;
      WriterState s(&w);
      out->error = txn(s, cmd.txn(), env, &resp);
      w.end();
      out->response = std::move(resp);
      break;
    }
    case Command::kCompaction: {
      const auto& r = cmd.compaction();
      etcdserverpb::CompactionResponse resp;
      w.end();
      if (r.revision() <= w.compact_revision()) {
        out->error = errors::compacted();
      } else if (r.revision() > w.revision()) {
        out->error = errors::future_rev();
      } else {
        w.compact(r.revision());
        if (r.physical()) out->wait_compaction = r.revision();
      }
      resp.mutable_header()->set_revision(w.revision());
      out->response = std::move(resp);
      break;
    }
    case Command::kLeaseGrant: {
      const auto& r = cmd.lease_grant();
      etcdserverpb::LeaseGrantResponse resp;
      w.end();
      int64_t ttl = 0;
      out->error = lessor_->grant(w, r.id(), r.ttl(), &ttl);
      resp.set_id(r.id());
      resp.set_ttl(ttl);
      resp.mutable_header()->set_revision(w.revision());
      out->response = std::move(resp);
      break;
    }
    case Command::kLeaseRevoke: {
      etcdserverpb::LeaseRevokeResponse resp;
      w.end();
      out->error = lessor_->revoke(w, cmd.lease_revoke().id());
      resp.mutable_header()->set_revision(w.revision());
      out->response = std::move(resp);
      break;
    }
    case Command::kAlarm: {
      const auto& r = cmd.alarm();
      etcdserverpb::AlarmResponse resp;
      w.end();
      std::vector<etcdserverpb::AlarmMember> changed;
      if (r.action() == etcdserverpb::AlarmRequest::ACTIVATE) {
        changed = alarms_->activate(w, r.memberid(), r.alarm());
      } else if (r.action() == etcdserverpb::AlarmRequest::DEACTIVATE) {
        changed = alarms_->deactivate(w, r.memberid(), r.alarm());
      } else {
        changed = alarms_->list(r.memberid(), r.alarm());
      }
      for (auto& m : changed) *resp.add_alarms() = std::move(m);
      out->response = std::move(resp);
      break;
    }
    case Command::kQueueAssign: {
      queues_->assign(w, cmd.queue_assign(), cmd.time_ms());
      w.end();
      break;
    }
    case Command::kMemberAttributes: {
      w.end();
      members_->publish(w, cmd.member_attributes());
      break;
    }
    default:
      w.end();
      out->error = errors::internal("unknown command in the log");
      break;
  }
}

}  // namespace etcdq::apply
