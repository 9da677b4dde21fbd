#include "member/reads.h"

#include <chrono>
#include <memory>
#include <utility>

#include "common/metrics.h"

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

namespace {

// etcd_server_range_duration_seconds{success}: the range itself, once the
// read may go ahead (after any read index), as etcd's txn.Range times it
// (server/etcdserver/txn/metrics.go); etcd's buckets. Lock-free: on every
// Range.
struct RangeSeconds {
  metrics::FastHistogram ok{metrics::exponential_buckets(0.0001, 2, 20)};
  metrics::FastHistogram failed{metrics::exponential_buckets(0.0001, 2, 20)};
  std::unique_ptr<metrics::SourceHandle> source = metrics::add_source([this](std::vector<prometheus::MetricFamily>* out) {
    auto f = metrics::family("etcd_server_range_duration_seconds", "The latency distributions of txn.Range",
                             prometheus::MetricType::Histogram);
    if (failed.count() > 0) failed.add_to(&f, {{"success", "false"}});
    if (ok.count() > 0) ok.add_to(&f, {{"success", "true"}});
    if (!f.metric.empty()) out->push_back(std::move(f));
  });
};

RangeSeconds& range_seconds() {
  static auto* r = new RangeSeconds;  // never destroyed: reads may run until exit
  return *r;
}

}  // namespace

void range(Context& ctx, ReadMode mode, const etcdserverpb::RangeRequest* req, etcdserverpb::RangeResponse* resp,
           std::function<Error()> check, std::function<void(Error)> done) {
  Context* c = &ctx;
  range_seconds();
  read(ctx, mode, std::move(check),
       [c, req, resp](apply::ViewState& s) {
         auto start = std::chrono::steady_clock::now();
         Error e = apply::range(s, *req, resp);
         RangeSeconds& h = range_seconds();
         (e ? h.failed : h.ok).observe(metrics::seconds_since(start));
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
