#include "apply/capped_layer.h"

#include "apply/validate.h"

namespace etcdq::apply {

Error CappedLayer::put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) {
  if (no_space()) return errors::no_space();
  return next().put(c, r, resp);
}

Error CappedLayer::txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) {
  if (no_space() && txn_has_put(r)) return errors::no_space();  // etcd's capped applier: cost > 0
  return next().txn(c, r, resp);
}

Error CappedLayer::lease_grant(ApplyCtx& c, const etcdserverpb::LeaseGrantRequest& r,
                               etcdserverpb::LeaseGrantResponse* resp) {
  if (no_space()) return errors::no_space();
  return next().lease_grant(c, r, resp);
}

}  // namespace etcdq::apply
