// The chain's top layer (chain.h): while a CORRUPT alarm is active, every
// command but Alarm is refused with errors::corrupt(), so that a member
// whose state diverged stops changing the key space until an operator
// deactivates the alarm. As etcd's applierV3Corrupt (server/etcdserver/
// corrupt.go), which etcd installs when the alarm is raised; this layer
// asks the alarm table on each command instead, since an alarm may change
// in the middle of an entry. A member publishing its attributes is not a
// change of the key space and passes (the cluster's membership must keep
// working for the operator to repair it).
//
// Thread-safety: the apply thread.
#pragma once

#include "apply/alarms.h"
#include "apply/chain.h"

namespace etcdq::apply {

class CorruptLayer final : public Forwarding {
 public:
  CorruptLayer(const Alarms* alarms, Layer* next) : Forwarding(next), alarms_(alarms) {}
  std::string_view name() const override { return "corrupt"; }

  Error put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) override;
  Error delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                     etcdserverpb::DeleteRangeResponse* resp) override;
  Error txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) override;
  Error compaction(ApplyCtx& c, const etcdserverpb::CompactionRequest& r, etcdserverpb::CompactionResponse* resp,
                   int64_t* wait_compaction) override;
  Error lease_grant(ApplyCtx& c, const etcdserverpb::LeaseGrantRequest& r,
                    etcdserverpb::LeaseGrantResponse* resp) override;
  Error lease_revoke(ApplyCtx& c, const etcdserverpb::LeaseRevokeRequest& r,
                     etcdserverpb::LeaseRevokeResponse* resp) override;
  Error plugin_command(ApplyCtx& c) override;

 private:
  bool corrupt() const { return alarms_->active(etcdserverpb::CORRUPT); }

  const Alarms* alarms_;
};

}  // namespace etcdq::apply
