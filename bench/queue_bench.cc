// etcdq_queue_bench: end-to-end throughput of a work queue (QUEUES.md),
// through nothing but etcd's API: producers Put /q/{queue}/p/{tail},
// consumers Watch /q/{queue}/c/{consumer}, and each delivered message is
// acked with a Delete of its key.
//
//   etcdq_queue_bench --endpoints 127.0.0.1:2379 --messages 100000 --consumers 4 --json out.json
//   etcdq_queue_bench ... --produce-batch 16 --ack-batch 256
//
// Batches are what a client that moves many messages would send, still
// nothing but etcd's API: --produce-batch N puts N messages with one Txn of
// N Puts (each request in flight carries N); --ack-batch N acks with one Txn
// of Deletes per consumer at a time, of every delivered message not acked
// yet, up to N (a consumer's acks wait while its previous Txn is in flight,
// so a batch grows with the load and stays small when it is light).
//
// Reports messages/s produced (acknowledged Puts), delivered (first
// deliveries) and acked (Deletes that removed the message) over the whole
// run, and the produce-to-delivery delay (the time in the payload to the
// event's arrival) p50/p99/max. Checks: every message is delivered and
// acked; duplicates (redeliveries) and errors are counted; exit 1 when a
// message is missing or a call failed.
//
// Open loop (--rate R): one Put every 1/R s from the main thread, never
// waiting for earlier ones (--in-flight is then ignored), to measure the
// produce-to-delivery delay at a given load rather than at saturation.
// --plain runs the same loop on plain keys, for etcd (which has no
// queues): Puts to /plain-{queue}/m{seq}, one consumer watching the prefix
// /plain-{queue}/ and deleting each key it sees put (etcd's nearest to an
// ack); needs --consumers 1.
//
// Threads: gRPC's callback threads; the main thread only paces and waits.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/grpc_client.h"
#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using bench::now_ns;

struct Options {
  std::vector<std::string> produce_endpoints{"127.0.0.1:2379"};
  std::vector<std::string> consume_endpoints;  // default: produce_endpoints
  std::string queue;
  int64_t messages = 100000;
  int consumers = 4;
  int in_flight = 256;  // Puts in flight
  int max_in_flight = 256;  // per consumer, written to /q/{queue}/config
  int value_size = 256;
  int produce_batch = 1;  // Puts a request
  int ack_batch = 1;      // Deletes a request
  int timeout_s = 300;
  double rate = 0;     // Puts a second, open loop; 0: --in-flight Puts kept in flight
  bool plain = false;  // plain keys and a prefix watch (etcd)
  std::string json;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--produce-endpoints" || a == "--endpoints") {
      if (!bench::parse_endpoints(val(), &o->produce_endpoints)) return false;
    } else if (a == "--consume-endpoints") {
      if (!bench::parse_endpoints(val(), &o->consume_endpoints)) return false;
    } else if (a == "--queue") o->queue = val();
    else if (a == "--messages") o->messages = std::stoll(val());
    else if (a == "--consumers") o->consumers = std::stoi(val());
    else if (a == "--in-flight") o->in_flight = std::stoi(val());
    else if (a == "--max-in-flight") o->max_in_flight = std::stoi(val());
    else if (a == "--value-size") o->value_size = std::max(16, std::stoi(val()));
    else if (a == "--produce-batch") o->produce_batch = std::stoi(val());
    else if (a == "--ack-batch") o->ack_batch = std::stoi(val());
    else if (a == "--timeout") o->timeout_s = std::stoi(val());
    else if (a == "--json") o->json = val();
    else if (a == "--rate") o->rate = std::stod(val());
    else if (a == "--plain") o->plain = true;
    else if (a == "--help" || a == "-h") return false;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return false;
    }
  }
  if (o->consume_endpoints.empty()) o->consume_endpoints = o->produce_endpoints;
  if (o->queue.empty()) o->queue = "bench" + std::to_string(now_ns() % 1000000000);
  if (o->plain && o->consumers != 1) return false;
  return o->messages > 0 && o->consumers > 0 && o->in_flight > 0 && o->produce_batch > 0 && o->ack_batch > 0;
}

// One unary call in flight: its context, request and response live until
// the callback deletes them.
template <typename Req, typename Resp>
struct UnaryCall {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};
using TxnCall = UnaryCall<etcdserverpb::TxnRequest, etcdserverpb::TxnResponse>;

struct Shared {
  Options opt;
  std::vector<std::atomic<uint8_t>> delivered;  // by message seq: deliveries (saturating)
  std::atomic<int64_t> produced{0}, first_deliveries{0}, duplicates{0}, acked{0}, ack_noop{0}, errors{0};
  std::atomic<int64_t> last_produce_ns{0}, last_delivery_ns{0}, last_ack_ns{0};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint32_t> delays_us;  // under mu
  std::string first_error;          // under mu
  explicit Shared(const Options& o) : opt(o), delivered(static_cast<size_t>(o.messages)) {}
  void error(const std::string& what) {
    errors.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.empty()) first_error = what;
  }
};

class Consumer final : public grpc::ClientBidiReactor<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse> {
 public:
  Consumer(Shared* s, std::shared_ptr<grpc::Channel> ch, int n) : s_(s), kv_(etcdserverpb::KV::NewStub(ch)) {
    watch_ = etcdserverpb::Watch::NewStub(ch);
    if (s->opt.plain) {
      req_.mutable_create_request()->set_key("/plain-" + s->opt.queue + "/");
      req_.mutable_create_request()->set_range_end("/plain-" + s->opt.queue + "0");
    } else {
      req_.mutable_create_request()->set_key("/q/" + s->opt.queue + "/c/consumer-" + std::to_string(n));
    }
    watch_->async()->Watch(&ctx_, this);
    StartWrite(&req_);
    StartRead(&resp_);
    StartCall();
  }
  void cancel() { ctx_.TryCancel(); }
  bool wait_created(int timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(timeout_s), [&] { return created_ || done_; }) && created_;
  }
  void wait_done() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

  void OnWriteDone(bool) override {}
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (resp_.created()) {
      std::lock_guard<std::mutex> lock(mu_);
      created_ = true;
      cv_.notify_all();
    }
    if (resp_.canceled() && !resp_.created()) s_->error("watch canceled: " + resp_.cancel_reason());
    int64_t recv = now_ns();
    std::vector<uint32_t> delays;
    for (const auto& ev : resp_.events()) {
      if (ev.type() != mvccpb::Event::PUT) continue;  // --plain: the acks' own deletes
      const auto& kv = ev.kv();
      if (kv.value().size() < 16) {
        s_->error("unexpected event on " + kv.key());
        continue;
      }
      int64_t sent, seq;
      std::memcpy(&sent, kv.value().data(), 8);
      std::memcpy(&seq, kv.value().data() + 8, 8);
      if (seq < 0 || seq >= s_->opt.messages) {
        s_->error("unexpected message " + kv.key());
        continue;
      }
      if (s_->delivered[seq].fetch_add(1) == 0) {
        s_->first_deliveries.fetch_add(1);
        delays.push_back(static_cast<uint32_t>(std::min<int64_t>((recv - sent) / 1000, UINT32_MAX)));
      } else {
        s_->duplicates.fetch_add(1);
      }
      ack(kv.key());
    }
    flush_acks();
    s_->last_delivery_ns.store(recv);
    if (!delays.empty()) {
      std::lock_guard<std::mutex> lock(s_->mu);
      s_->delays_us.insert(s_->delays_us.end(), delays.begin(), delays.end());
    }
    resp_.Clear();
    StartRead(&resp_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

 private:
  using Call = UnaryCall<etcdserverpb::DeleteRangeRequest, etcdserverpb::DeleteRangeResponse>;
  void ack(const std::string& key) {
    if (s_->opt.ack_batch > 1) {
      std::lock_guard<std::mutex> lock(mu_);
      unacked_.push_back(key);
      return;
    }
    auto* c = new Call;
    c->req.set_key(key);
    Shared* s = s_;
    kv_->async()->DeleteRange(&c->ctx, &c->req, &c->resp, [c, s](grpc::Status st) {
      if (!st.ok()) {
        s->error("delete: " + st.error_message());
      } else if (c->resp.deleted() == 1) {
        s->acked.fetch_add(1);
        s->last_ack_ns.store(now_ns());
        s->cv.notify_all();
      } else {
        s->ack_noop.fetch_add(1);  // a redelivered copy acked twice
      }
      delete c;
    });
  }

  // Sends one Txn of Deletes of what is waiting, unless one is in flight;
  // its completion sends the next.
  void flush_acks() {
    auto* c = new TxnCall;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ack_in_flight_ || unacked_.empty()) {
        delete c;
        return;
      }
      size_t n = std::min(unacked_.size(), static_cast<size_t>(s_->opt.ack_batch));
      for (size_t i = 0; i < n; ++i) c->req.add_success()->mutable_request_delete_range()->set_key(std::move(unacked_[i]));
      unacked_.erase(unacked_.begin(), unacked_.begin() + static_cast<long>(n));
      ack_in_flight_ = true;
    }
    kv_->async()->Txn(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status st) {
      if (!st.ok()) {
        s_->error("ack txn: " + st.error_message());
      } else {
        int64_t acked = 0, noop = 0;
        for (const auto& r : c->resp.responses()) (r.response_delete_range().deleted() == 1 ? acked : noop) += 1;
        s_->acked.fetch_add(acked);
        s_->ack_noop.fetch_add(noop);
        s_->last_ack_ns.store(now_ns());
        s_->cv.notify_all();
      }
      delete c;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ack_in_flight_ = false;
      }
      flush_acks();
    });
  }

  Shared* s_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch_;
  grpc::ClientContext ctx_;
  etcdserverpb::WatchRequest req_;
  etcdserverpb::WatchResponse resp_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool created_ = false, done_ = false;
  std::vector<std::string> unacked_;  // --ack-batch: delivered, not sent yet
  bool ack_in_flight_ = false;
};

class Producer {
 public:
  Producer(Shared* s, std::vector<std::unique_ptr<etcdserverpb::KV::Stub>>* stubs) : s_(s), stubs_(stubs) {}
  void run() {
    if (s_->opt.rate > 0) return paced();
    for (int i = 0; i < s_->opt.in_flight; ++i) next();
  }

 private:
  using Call = UnaryCall<etcdserverpb::PutRequest, etcdserverpb::PutResponse>;
  std::string payload(int64_t seq) const {
    std::string v(static_cast<size_t>(s_->opt.value_size), 'x');
    int64_t t = now_ns();
    std::memcpy(v.data(), &t, 8);
    std::memcpy(v.data() + 8, &seq, 8);
    return v;
  }
  std::string key(int64_t seq) const {
    if (s_->opt.plain) return "/plain-" + s_->opt.queue + "/m" + std::to_string(seq);
    return "/q/" + s_->opt.queue + "/p/m" + std::to_string(seq);
  }
  // Open loop: Put number i at start + i / rate.
  void paced() {
    auto start = Clock::now();
    for (int64_t i = 0; i < s_->opt.messages; ++i) {
      std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(1e9 * i / s_->opt.rate)));
      put(issued_.fetch_add(1), false);
    }
  }
  void next() {
    if (s_->opt.produce_batch > 1) return next_batch();
    int64_t seq = issued_.fetch_add(1);
    if (seq >= s_->opt.messages) return;
    put(seq, true);
  }
  void put(int64_t seq, bool chain) {
    auto* c = new Call;
    c->req.set_key(key(seq));
    c->req.set_value(payload(seq));
    auto& stub = (*stubs_)[static_cast<size_t>(seq) % stubs_->size()];
    stub->async()->Put(&c->ctx, &c->req, &c->resp, [this, c, chain](grpc::Status st) {
      if (!st.ok()) {
        s_->error("put: " + st.error_message());
      } else {
        s_->produced.fetch_add(1);
        s_->last_produce_ns.store(now_ns());
      }
      delete c;
      if (chain) next();
    });
  }
  void next_batch() {
    int64_t first = issued_.fetch_add(s_->opt.produce_batch);
    if (first >= s_->opt.messages) return;
    int64_t end = std::min<int64_t>(first + s_->opt.produce_batch, s_->opt.messages);
    auto* c = new TxnCall;
    for (int64_t seq = first; seq < end; ++seq) {
      auto* put = c->req.add_success()->mutable_request_put();
      put->set_key(key(seq));
      put->set_value(payload(seq));
    }
    auto& stub = (*stubs_)[static_cast<size_t>(first / s_->opt.produce_batch) % stubs_->size()];
    stub->async()->Txn(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status st) {
      if (!st.ok()) {
        s_->error("produce txn: " + st.error_message());
      } else {
        s_->produced.fetch_add(c->resp.responses_size());
        s_->last_produce_ns.store(now_ns());
      }
      delete c;
      next_batch();
    });
  }
  Shared* s_;
  std::vector<std::unique_ptr<etcdserverpb::KV::Stub>>* stubs_;
  std::atomic<int64_t> issued_{0};
};

uint32_t quantile(std::vector<uint32_t>& v, double q) {
  if (v.empty()) return 0;
  size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()));
  rank = std::min(rank, v.size() - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<long>(rank), v.end());
  return v[rank];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr, "usage: etcdq_queue_bench [--endpoints A,B] [--consume-endpoints C,D] [--messages N] "
                         "[--consumers C] [--in-flight P] [--max-in-flight M] [--value-size B] [--produce-batch N] "
                         "[--ack-batch N] [--rate R] [--plain] [--json FILE]\n");
    return 2;
  }
  Shared s(o);
  int nch = 0;
  if (!o.plain) {
    auto kv = etcdserverpb::KV::NewStub(bench::make_channel(o.produce_endpoints[0], nch++));
    grpc::ClientContext ctx;
    etcdserverpb::PutRequest req;
    etcdserverpb::PutResponse resp;
    req.set_key("/q/" + o.queue + "/config");
    req.set_value("{\"max_in_flight\": " + std::to_string(o.max_in_flight) + ", \"visibility_timeout\": 60}");
    auto st = kv->Put(&ctx, req, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "cannot set the queue's config: %s\n", st.error_message().c_str());
      return 1;
    }
  }
  std::vector<std::unique_ptr<Consumer>> consumers;
  for (int i = 0; i < o.consumers; ++i) {
    const auto& ep = o.consume_endpoints[static_cast<size_t>(i) % o.consume_endpoints.size()];
    consumers.push_back(std::make_unique<Consumer>(&s, bench::make_channel(ep, nch++), i));
  }
  for (auto& c : consumers) {
    if (!c->wait_created(30)) {
      std::fprintf(stderr, "a consumer watch was not created\n");
      return 1;
    }
  }
  // Members report their consumers to the leader every second.
  std::this_thread::sleep_for(std::chrono::milliseconds(o.consume_endpoints == o.produce_endpoints ? 100 : 1500));

  std::vector<std::unique_ptr<etcdserverpb::KV::Stub>> stubs;
  for (int i = 0; i < 8; ++i) {
    stubs.push_back(etcdserverpb::KV::NewStub(bench::make_channel(o.produce_endpoints[static_cast<size_t>(i) % o.produce_endpoints.size()], nch++)));
  }
  Producer p(&s, &stubs);
  int64_t start = now_ns();
  p.run();
  auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  int64_t last_print = start;
  for (;;) {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait_for(lock, std::chrono::milliseconds(200));
    bool done = s.acked.load() + s.errors.load() >= o.messages || Clock::now() > deadline;
    int64_t t = now_ns();
    if (t - last_print > 1'000'000'000LL || done) {
      std::fprintf(stderr, "  %5.1f s: produced %lld, delivered %lld, acked %lld\n", (t - start) / 1e9,
                   static_cast<long long>(s.produced.load()), static_cast<long long>(s.first_deliveries.load()),
                   static_cast<long long>(s.acked.load()));
      last_print = t;
    }
    if (done) break;
  }
  for (auto& c : consumers) c->cancel();
  for (auto& c : consumers) c->wait_done();

  double produce_s = (s.last_produce_ns.load() - start) / 1e9;
  double deliver_s = (s.last_delivery_ns.load() - start) / 1e9;
  double ack_s = (s.last_ack_ns.load() - start) / 1e9;
  int64_t missing = 0;
  for (auto& d : s.delivered) missing += d.load() == 0;
  std::vector<uint32_t> delays;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    delays = s.delays_us;
  }
  double p50 = quantile(delays, 0.5) / 1000.0, p99 = quantile(delays, 0.99) / 1000.0;
  double mx = delays.empty() ? 0 : *std::max_element(delays.begin(), delays.end()) / 1000.0;
  auto rate = [](int64_t n, double secs) { return secs > 0 ? n / secs : 0.0; };
  std::printf("| messages | consumers | produced/s | delivered/s | acked/s (end to end) | delay p50 ms | p99 ms | max ms "
              "| redelivered | missing | errors |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
              "| ---: |\n");
  std::printf("| %lld | %d | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %lld | %lld | %lld |\n",
              static_cast<long long>(o.messages), o.consumers, rate(s.produced.load(), produce_s),
              rate(s.first_deliveries.load(), deliver_s), rate(s.acked.load(), ack_s), p50, p99, mx,
              static_cast<long long>(s.duplicates.load()), static_cast<long long>(missing),
              static_cast<long long>(s.errors.load()));
  if (!s.first_error.empty()) std::fprintf(stderr, "first error: %s\n", s.first_error.c_str());
  if (!o.plain) {
    // The queue is empty now; its config key would keep it listed in /metrics.
    auto kv = etcdserverpb::KV::NewStub(bench::make_channel(o.produce_endpoints[0], nch++));
    grpc::ClientContext ctx;
    etcdserverpb::DeleteRangeRequest req;
    etcdserverpb::DeleteRangeResponse resp;
    req.set_key("/q/" + o.queue + "/config");
    kv->DeleteRange(&ctx, req, &resp);
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\"messages\":" << o.messages << ",\"consumers\":" << o.consumers << ",\"value_size\":" << o.value_size
      << ",\"produce_batch\":" << o.produce_batch << ",\"ack_batch\":" << o.ack_batch
      << ",\"produced_per_s\":" << rate(s.produced.load(), produce_s)
      << ",\"delivered_per_s\":" << rate(s.first_deliveries.load(), deliver_s)
      << ",\"acked_per_s\":" << rate(s.acked.load(), ack_s) << ",\"delay_ms\":{\"p50\":" << p50 << ",\"p99\":" << p99
      << ",\"max\":" << mx << "},\"redelivered\":" << s.duplicates.load() << ",\"missing\":" << missing
      << ",\"errors\":" << s.errors.load() << "}\n";
  }
  return missing == 0 && s.errors.load() == 0 && s.acked.load() == o.messages ? 0 : 1;
}
