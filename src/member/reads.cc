#include "member/reads.h"

#include <utility>

namespace etcdq::member {

ReadMode read_mode(const etcdserverpb::RangeRequest& r) {
  return r.serializable() ? ReadMode::kSerializable : ReadMode::kLinearizable;
}

namespace {
bool txn_is_serializable(const etcdserverpb::TxnRequest& r) {
  auto all = [](const auto& ops) {
    for (const auto& op : ops) {
      if (op.has_request_range() && !op.request_range().serializable()) return false;
      if (op.has_request_txn() && !txn_is_serializable(op.request_txn())) return false;
    }
    return true;
  };
  return all(r.success()) && all(r.failure());
}
}  // namespace

ReadMode read_mode(const etcdserverpb::TxnRequest& r) {
  return txn_is_serializable(r) ? ReadMode::kSerializable : ReadMode::kLinearizable;
}

void when_readable(Context& ctx, ReadMode mode, std::function<void(Error)> then) {
  if (mode == ReadMode::kSerializable) {
    then({});
  } else {
    ctx.consensus->read_barrier(std::move(then));
  }
}

void read(Context& ctx, ReadMode mode, std::function<Error()> check, std::function<Error(apply::ViewState&)> read,
          std::function<void(Error)> done) {
  Context* c = &ctx;
  when_readable(ctx, mode, [c, check = std::move(check), read = std::move(read), done = std::move(done)](Error e) {
    if (e) return done(e);
    if (check) {
      if (Error denied = check()) return done(denied);
    }
    auto view = c->store->view();
    apply::ViewState s(*view, *c->keys);
    done(read(s));
  });
}

void range(Context& ctx, ReadMode mode, const etcdserverpb::RangeRequest* req, etcdserverpb::RangeResponse* resp,
           std::function<Error()> check, std::function<void(Error)> done) {
  Context* c = &ctx;
  read(ctx, mode, std::move(check),
       [c, req, resp](apply::ViewState& s) {
         Error e = apply::range(s, *req, resp);
         if (!e) c->fill_header(resp->mutable_header());
         return e;
       },
       std::move(done));
}

void read_txn(Context& ctx, ReadMode mode, const etcdserverpb::TxnRequest* req, etcdserverpb::TxnResponse* resp,
              std::function<Error()> check, std::function<void(Error)> done) {
  Context* c = &ctx;
  read(ctx, mode, std::move(check),
       [c, req, resp](apply::ViewState& s) {
         // A read-only txn has no Put: no lease to look up.
         Error e = apply::txn(s, *req, apply::Env{[](int64_t) { return false; }}, resp);
         if (!e) c->fill_header(resp->mutable_header());
         return e;
       },
       std::move(done));
}

}  // namespace etcdq::member
