// put, txn-put, range and delete: one unary KV call per request.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "common/grpc_client.h"
#include "loadgen/workload.h"

namespace loadgen {
namespace {

std::string status_error(const grpc::Status& s) {
  return s.error_message().empty() ? "gRPC code " + std::to_string(s.error_code()) : s.error_message();
}

int key_width(const Options& o) {
  // Keys are zero-padded decimals of --key-size digits; a key space wider
  // than that gets wider keys rather than colliding ones.
  int digits = 1;
  for (int64_t n = o.key_space - 1; n >= 10; n /= 10) ++digits;
  return std::max(o.key_size, digits);
}

int64_t key_number(const Options& o, int64_t seq) {
  return o.sequential_keys ? seq % o.key_space : static_cast<int64_t>(mix64(static_cast<uint64_t>(seq)) % o.key_space);
}

// put: Put(key, value); checks the header's revision is positive.
class PutWorkload : public Workload {
 public:
  PutWorkload(const Options& o, Connections* c) : o_(o), c_(c), value_(o.value_size, 'v'), width_(key_width(o)) {}
  std::vector<std::string> op_names() const override { return {"put"}; }
  void issue(int client, int64_t seq, Done done) override {
    auto* call = new Call<etcdserverpb::PutRequest, etcdserverpb::PutResponse>;
    call->req.set_key(numbered_key("", key_number(o_, seq), width_));
    call->req.set_value(value_);
    c_->kv[c_->of_client(client)]->async()->Put(&call->ctx, &call->req, &call->resp, [call, done](grpc::Status s) {
      Outcome out;
      if (!s.ok())
        out.error = status_error(s);
      else if (call->resp.header().revision() <= 0)
        out.error = "check: put without a revision";
      delete call;
      done(std::move(out));
    });
  }

 private:
  const Options& o_;
  Connections* c_;
  std::string value_;
  int width_;
};

// txn-put: Txn(if version(key) > -1 then put(key, value) else range(key)).
// The compare always holds, so every answer must say succeeded with one put.
class TxnPutWorkload : public Workload {
 public:
  TxnPutWorkload(const Options& o, Connections* c) : o_(o), c_(c), value_(o.value_size, 'v'), width_(key_width(o)) {}
  std::vector<std::string> op_names() const override { return {"txn-put"}; }
  void issue(int client, int64_t seq, Done done) override {
    auto* call = new Call<etcdserverpb::TxnRequest, etcdserverpb::TxnResponse>;
    const std::string key = numbered_key("", key_number(o_, seq), width_);
    auto* cmp = call->req.add_compare();
    cmp->set_key(key);
    cmp->set_target(etcdserverpb::Compare::VERSION);
    cmp->set_result(etcdserverpb::Compare::GREATER);
    cmp->set_version(-1);
    auto* put = call->req.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value(value_);
    call->req.add_failure()->mutable_request_range()->set_key(key);
    c_->kv[c_->of_client(client)]->async()->Txn(
        &call->ctx, &call->req, &call->resp, [this, call, done](grpc::Status s) {
          Outcome out;
          if (!s.ok())
            out.error = status_error(s);
          else if (!call->resp.succeeded() || call->resp.responses_size() != 1 ||
                   !call->resp.responses(0).has_response_put())
            out.error = "check: txn whose compare holds did not succeed";
          else
            succeeded_.fetch_add(1, std::memory_order_relaxed);
          delete call;
          done(std::move(out));
        });
  }
  int64_t finish(std::map<std::string, int64_t>* checks) override {
    (*checks)["txn_succeeded"] = succeeded_.load();
    return 0;
  }

 private:
  const Options& o_;
  Connections* c_;
  std::string value_;
  int width_;
  std::atomic<int64_t> succeeded_{0};
};

// range: --range-mode single reads one of --preload keys written first and
// checks it comes back whole; prefix reads the first --limit keys under the
// prefix and checks count, more and the page size.
class RangeWorkload : public Workload {
 public:
  // Keys are at least --key-size digits wide, so that loads of a growing
  // data set (--preload-start) keep one key format.
  RangeWorkload(const Options& o, Connections* c) : o_(o), c_(c), width_(std::max(o.key_size, digits(o.preload))) {}
  std::vector<std::string> op_names() const override { return {o_.range_mode == "single" ? "range" : "range-prefix"}; }
  bool prepare(std::string* error) override {
    if (o_.skip_preload) return true;
    return load_keys(c_, kPrefix, o_.preload_start, o_.preload, width_, std::string(o_.value_size, 'r'), error);
  }
  void issue(int client, int64_t seq, Done done) override {
    auto* call = new Call<etcdserverpb::RangeRequest, etcdserverpb::RangeResponse>;
    const bool single = o_.range_mode == "single";
    if (single) {
      call->req.set_key(
          numbered_key(kPrefix, static_cast<int64_t>(mix64(static_cast<uint64_t>(seq)) % o_.preload), width_));
    } else {
      call->req.set_key(kPrefix);
      call->req.set_range_end(kPrefixEnd);
      call->req.set_limit(o_.limit);
    }
    call->req.set_serializable(o_.serializable);
    c_->kv[c_->of_client(client)]->async()->Range(
        &call->ctx, &call->req, &call->resp, [this, call, single, done](grpc::Status s) {
          Outcome out;
          const auto& r = call->resp;
          if (!s.ok()) {
            out.error = status_error(s);
          } else if (single) {
            if (r.kvs_size() != 1 || r.count() != 1 || r.kvs(0).key() != call->req.key() ||
                r.kvs(0).value().size() != static_cast<size_t>(o_.value_size))
              out.error = "check: single-key range did not return the key";
          } else {
            const int64_t page = std::min<int64_t>(o_.limit, o_.preload);
            if (r.kvs_size() != page || r.count() != o_.preload || r.more() != (o_.preload > o_.limit))
              out.error = "check: prefix range returned the wrong page";
          }
          delete call;
          done(std::move(out));
        });
  }

 private:
  static int digits(int64_t n) {
    int d = 1;
    for (n -= 1; n >= 10; n /= 10) ++d;
    return d;
  }
  static constexpr const char* kPrefix = "/bench-range/";
  static constexpr const char* kPrefixEnd = "/bench-range0";
  const Options& o_;
  Connections* c_;
  int width_;
};

// delete: writes --preload keys, then deletes each once (the run ends when
// they are gone); each DeleteRange must report one deletion.
class DeleteWorkload : public Workload {
 public:
  DeleteWorkload(const Options& o, Connections* c) : o_(o), c_(c), width_(key_width(o)) {}
  std::vector<std::string> op_names() const override { return {"delete"}; }
  bool prepare(std::string* error) override {
    // A fresh prefix per run, so that a second delete run has keys to delete.
    prefix_ = "/bench-del/" + std::to_string(bench::now_ns()) + "/";
    return load_keys(c_, prefix_, 0, o_.preload, width_, std::string(o_.value_size, 'd'), error);
  }
  int64_t max_requests() const override { return o_.preload; }
  void issue(int client, int64_t seq, Done done) override {
    auto* call = new Call<etcdserverpb::DeleteRangeRequest, etcdserverpb::DeleteRangeResponse>;
    call->req.set_key(numbered_key(prefix_, seq, width_));
    c_->kv[c_->of_client(client)]->async()->DeleteRange(
        &call->ctx, &call->req, &call->resp, [call, done](grpc::Status s) {
          Outcome out;
          if (!s.ok())
            out.error = status_error(s);
          else if (call->resp.deleted() != 1)
            out.error = "check: delete of a live key deleted " + std::to_string(call->resp.deleted());
          delete call;
          done(std::move(out));
        });
  }

 private:
  const Options& o_;
  Connections* c_;
  int width_;
  std::string prefix_;
};

}  // namespace

std::string numbered_key(const std::string& prefix, int64_t i, int width) {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, "%0*lld", std::min(width, 24), static_cast<long long>(i));
  std::string k = prefix;
  if (width > n) k.append(static_cast<size_t>(width - n), '0');
  k.append(buf, static_cast<size_t>(n));
  return k;
}

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool load_keys(Connections* conns, const std::string& prefix, int64_t first, int64_t end, int width,
               const std::string& value, std::string* error) {
  // Txns of kPutsPerTxn puts (under etcd's default --max-txn-ops of 128):
  // loading a million keys takes seconds rather than minutes, on either
  // server, and stores the same keys and values as single puts would.
  constexpr int kInFlight = 32;
  constexpr int64_t kPutsPerTxn = 100;
  std::mutex mu;
  std::condition_variable cv;
  int64_t next = first, inflight = 0, sent = 0;
  std::string first_error;
  std::unique_lock<std::mutex> lk(mu);
  while (next < end && first_error.empty()) {
    cv.wait(lk, [&] { return inflight < kInFlight; });
    ++inflight;
    auto* call = new Call<etcdserverpb::TxnRequest, etcdserverpb::TxnResponse>;
    const int64_t stop = std::min(end, next + kPutsPerTxn);
    for (; next < stop; ++next) {
      auto* put = call->req.add_success()->mutable_request_put();
      put->set_key(numbered_key(prefix, next, width));
      put->set_value(value);
    }
    conns->kv[static_cast<size_t>(sent++) % conns->kv.size()]->async()->Txn(
        &call->ctx, &call->req, &call->resp, [&, call](grpc::Status s) {
          std::lock_guard<std::mutex> g(mu);
          if (first_error.empty()) {
            if (!s.ok())
              first_error = "loading keys: " + status_error(s);
            else if (!call->resp.succeeded())
              first_error = "loading keys: txn without compares did not succeed";
          }
          --inflight;
          cv.notify_all();
          delete call;
        });
  }
  cv.wait(lk, [&] { return inflight == 0; });
  *error = first_error;
  return first_error.empty();
}

std::unique_ptr<Workload> make_kv_workload(const std::string& name, const Options& o, Connections* c) {
  if (name == "put") return std::make_unique<PutWorkload>(o, c);
  if (name == "txn-put") return std::make_unique<TxnPutWorkload>(o, c);
  if (name == "range") return std::make_unique<RangeWorkload>(o, c);
  if (name == "delete") return std::make_unique<DeleteWorkload>(o, c);
  return nullptr;
}

}  // namespace loadgen
