#include "apply/backend.h"

#include <vector>

namespace etcdq::apply {

BackendLayer::BackendLayer(lease::Lessor* lessor, Alarms* alarms, Members* members)
    : lessor_(lessor),
      alarms_(alarms),
      members_(members),
      leases_([lessor](int64_t id) { return lessor->exists(id); }) {}

Error BackendLayer::put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) {
  // Before the key's meaning is looked at, as etcd's applier checks the
  // lease before it writes.
  if (r.lease() != 0 && !leases_(r.lease())) return errors::lease_not_found();
  WriterState s(&c.w, *c.keys);
  return apply::put(s, r, env(c), resp);
}

Error BackendLayer::delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                                 etcdserverpb::DeleteRangeResponse* resp) {
  WriterState s(&c.w, *c.keys);
  return apply::delete_range(s, r, resp);
}

Error BackendLayer::txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) {
  WriterState s(&c.w, *c.keys);
  return apply::txn(s, r, env(c), resp);
}

Error BackendLayer::compaction(ApplyCtx& c, const etcdserverpb::CompactionRequest& r,
                               etcdserverpb::CompactionResponse* resp, int64_t* wait_compaction) {
  mvcc::Writer& w = c.w;
  Error e;
  if (r.revision() <= w.compact_revision()) {
    e = errors::compacted();
  } else if (r.revision() > w.revision()) {
    e = errors::future_rev();
  } else {
    w.compact(r.revision());
    if (r.physical()) *wait_compaction = r.revision();
  }
  resp->mutable_header()->set_revision(w.revision());
  return e;
}

Error BackendLayer::lease_grant(ApplyCtx& c, const etcdserverpb::LeaseGrantRequest& r,
                                etcdserverpb::LeaseGrantResponse* resp) {
  int64_t ttl = 0;
  Error e = lessor_->grant(c.w, r.id(), r.ttl(), &ttl);
  resp->set_id(r.id());
  resp->set_ttl(ttl);
  resp->mutable_header()->set_revision(c.w.revision());
  return e;
}

Error BackendLayer::lease_revoke(ApplyCtx& c, const etcdserverpb::LeaseRevokeRequest& r,
                                 etcdserverpb::LeaseRevokeResponse* resp) {
  Error e = lessor_->revoke(c.w, r.id());
  resp->mutable_header()->set_revision(c.w.revision());
  return e;
}

Error BackendLayer::alarm(ApplyCtx& c, const etcdserverpb::AlarmRequest& r, etcdserverpb::AlarmResponse* resp) {
  std::vector<etcdserverpb::AlarmMember> changed;
  if (r.action() == etcdserverpb::AlarmRequest::ACTIVATE) {
    changed = alarms_->activate(c.w, r.memberid(), r.alarm());
  } else if (r.action() == etcdserverpb::AlarmRequest::DEACTIVATE) {
    changed = alarms_->deactivate(c.w, r.memberid(), r.alarm());
  } else {
    changed = alarms_->list(r.memberid(), r.alarm());
  }
  for (auto& m : changed) *resp->add_alarms() = std::move(m);
  return {};
}

Error BackendLayer::plugin_command(ApplyCtx&) {
  return errors::internal("a key-space plug-in's command reached an apply chain without that plug-in");
}

Error BackendLayer::member_attributes(ApplyCtx& c, const MemberAttributes& m) {
  members_->publish(c.w, m);
  return {};
}

}  // namespace etcdq::apply
