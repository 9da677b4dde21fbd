// The chain's auth layer (chain.h), between the alarm layers and the key
// space, as etcd's authApplierV3 (server/etcdserver/apply/auth.go): every
// command from a client is checked again here, on every member, against
// the auth store as this entry finds it — the user its proposer named
// (Command.auth_user) must still have the permission the request needs
// (auth/request_checks.h), and the auth revision it was admitted at must
// not be older than the store's (errors::auth_old_revision(): a role or
// permission changed in between, the client retries). Auth management
// commands need the root role and are applied here, to the auth store.
// Internal commands (Command.internal) and everything while auth is
// disabled pass unchanged.
//
// Without an auth store (null) the layer passes everything and refuses
// auth management with errors::internal (a test chain).
//
// Thread-safety: the apply thread.
#pragma once

#include "apply/chain.h"
#include "auth/store.h"

namespace etcdq::apply {

class AuthLayer final : public Forwarding {
 public:
  AuthLayer(auth::Store* store, Layer* next) : Forwarding(next), store_(store) {}
  std::string_view name() const override { return "auth"; }

  void restored() override;

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
  Error auth_management(ApplyCtx& c) override;

 private:
  Error check(const ApplyCtx& c) const;

  auth::Store* store_;
};

}  // namespace etcdq::apply
