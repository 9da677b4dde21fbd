// The chain's bottom layer (chain.h): the operations themselves, as etcd's
// applierV3backend (server/etcdserver/apply.go) — KV ops on the MVCC store
// through the key space the layers above chose (kv.h), compaction, leases
// (lease/lessor.h), alarms (alarms.h) and member attributes (members.h).
// It knows nothing of the layers above: no alarm checks, no plug-ins.
//
// Errors (etcd's): Put with an unknown lease lease_not_found(); a Txn's
// pre-check errors (kv.h); Compaction below the watermark compacted(),
// above the revision future_rev(); the lessor's. plugin_command is refused
// with errors::internal: only its plug-in's layer gives it a meaning.
//
// Thread-safety: the apply thread.
#pragma once

#include "apply/alarms.h"
#include "apply/chain.h"
#include "apply/kv.h"
#include "apply/members.h"
#include "lease/lessor.h"

namespace etcdq::apply {

class BackendLayer final : public Layer {
 public:
  BackendLayer(lease::Lessor* lessor, Alarms* alarms, Members* members);
  std::string_view name() const override { return "backend"; }

  void begin_entry(mvcc::Writer&) override {}
  void before_commit(mvcc::Writer&) override {}
  void committed(int64_t) override {}
  // The lessor, alarms and members are reloaded by Applier::restore itself.
  void restored() override {}

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
  Error alarm(ApplyCtx& c, const etcdserverpb::AlarmRequest& r, etcdserverpb::AlarmResponse* resp) override;
  Error plugin_command(ApplyCtx& c) override;
  Error member_attributes(ApplyCtx& c, const MemberAttributes& m) override;
  Error auth_management(ApplyCtx&) override {
    return errors::internal("an auth command reached an apply chain without an auth store");
  }

 private:
  Env env(const ApplyCtx& c) const { return Env{leases_, c.cmd.time_ms()}; }

  lease::Lessor* lessor_;
  Alarms* alarms_;
  Members* members_;
  LeaseExists leases_;
};

}  // namespace etcdq::apply
