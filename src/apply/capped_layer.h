// The chain's second layer (chain.h): while a NOSPACE alarm is active,
// what adds data is refused with errors::no_space() — Put, a Txn with a
// write on any branch, LeaseGrant — and what frees space or only reads
// passes: DeleteRange, Compaction, LeaseRevoke, a read-only Txn, so that an
// operator can make room and deactivate the alarm. As etcd's
// applierV3Capped (server/etcdserver/apply.go); like CorruptLayer, it asks
// the alarm table on each command.
//
// Thread-safety: the apply thread.
#pragma once

#include "apply/alarms.h"
#include "apply/chain.h"

namespace etcdq::apply {

class CappedLayer final : public Forwarding {
 public:
  CappedLayer(const Alarms* alarms, Layer* next) : Forwarding(next), alarms_(alarms) {}
  std::string_view name() const override { return "capped"; }

  Error put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) override;
  Error txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) override;
  Error lease_grant(ApplyCtx& c, const etcdserverpb::LeaseGrantRequest& r,
                    etcdserverpb::LeaseGrantResponse* resp) override;

 private:
  bool no_space() const { return alarms_->active(etcdserverpb::NOSPACE); }

  const Alarms* alarms_;
};

}  // namespace etcdq::apply
