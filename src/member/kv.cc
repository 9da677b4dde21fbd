#include "member/kv.h"

#include <utility>

#include "mvcc/compactor.h"

namespace etcdq::member::kv {

Error validate(const etcdserverpb::RangeRequest& r) { return apply::validate_range(r); }

Error validate(const Context& ctx, const etcdserverpb::TxnRequest& r) {
  return apply::validate_txn(r, ctx.limits.max_txn_ops);
}

Error validate(const etcdserverpb::DeleteRangeRequest& r) { return apply::validate_delete_range(r); }

bool is_read_only(const etcdserverpb::TxnRequest& r) { return apply::txn_is_read_only(r); }

void when_compacted(Context& ctx, int64_t revision, std::function<void(Error)> done) {
  ctx.store->compactor().when_finished(revision, [done = std::move(done)](bool finished) {
    done(finished ? Error() : errors::stopped());
  });
}

}  // namespace etcdq::member::kv
