#include "apply/corrupt_layer.h"

namespace etcdq::apply {

Error CorruptLayer::put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) {
  if (corrupt()) return errors::corrupt();
  return next().put(c, r, resp);
}

Error CorruptLayer::delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                                 etcdserverpb::DeleteRangeResponse* resp) {
  if (corrupt()) return errors::corrupt();
  return next().delete_range(c, r, resp);
}

Error CorruptLayer::txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) {
  if (corrupt()) return errors::corrupt();
  return next().txn(c, r, resp);
}

Error CorruptLayer::compaction(ApplyCtx& c, const etcdserverpb::CompactionRequest& r,
                               etcdserverpb::CompactionResponse* resp, int64_t* wait_compaction) {
  if (corrupt()) return errors::corrupt();
  return next().compaction(c, r, resp, wait_compaction);
}

Error CorruptLayer::lease_grant(ApplyCtx& c, const etcdserverpb::LeaseGrantRequest& r,
                                etcdserverpb::LeaseGrantResponse* resp) {
  if (corrupt()) return errors::corrupt();
  return next().lease_grant(c, r, resp);
}

Error CorruptLayer::lease_revoke(ApplyCtx& c, const etcdserverpb::LeaseRevokeRequest& r,
                                 etcdserverpb::LeaseRevokeResponse* resp) {
  if (corrupt()) return errors::corrupt();
  return next().lease_revoke(c, r, resp);
}

Error CorruptLayer::plugin_command(ApplyCtx& c) {
  if (corrupt()) return errors::corrupt();
  return next().plugin_command(c);
}

}  // namespace etcdq::apply
