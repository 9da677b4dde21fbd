// The chain's auth slot (chain.h), between the alarm layers and the key
// space: where issue #13's checks go, as in etcd's authApplierV3
// (server/etcdserver/apply_auth.go) — the command's auth revision against
// the auth store's (a token issued before a role change is refused with
// ErrAuthOldRevision), then the user's permission on each key or range the
// command touches (a Txn's on every branch), refused with
// ErrPermissionDenied. etcdq has no users yet, so every command passes
// unchanged; the layer is in the chain today so that auth plugs in here
// without reordering anything (Applier's tests prove its place).
//
// Thread-safety: the apply thread.
#pragma once

#include "apply/chain.h"

namespace etcdq::apply {

class AuthLayer final : public Forwarding {
 public:
  explicit AuthLayer(Layer* next) : Forwarding(next) {}
  std::string_view name() const override { return "auth"; }
};

}  // namespace etcdq::apply
