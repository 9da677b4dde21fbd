// etcdq_watch_bench: watch fan-out load generator for any etcd v3 server.
//
// Opens --streams Watch streams over --watch-channels channels, spreads
// --watchers prefix watchers over them (watcher i watches "/fan/<i % P>/"),
// waits until every watcher is `created`, then puts "/fan/<j % P>/k<j>" at
// --rate puts/s (0 = as fast as --concurrency puts in flight allow) for
// --seconds from a separate channel, and measures what the watchers get:
//
//   - events delivered per second (all watchers together),
//   - commit->delivery delay: receive time minus the time the client got
//     the Put's response (matched by the response header's revision); an
//     event that arrives before its Put's response counts with a negative
//     delay,
//   - send->delivery delay: receive time minus the send time, which each
//     value carries in its first 8 bytes,
//   - exactness: each watcher must see every put to its prefix exactly once,
//     in increasing revision order, with the key and value that put wrote
//     (checked with a per-watcher count, a revision-order check and an
//     order-independent hash of (revision, put index) compared with what the
//     Put responses say). Any violation or starved watcher exits 1.
//
// --shape k8s is kube-apiserver's shape instead (its watch cache): one
// stream with one prefix watcher per resource (20 "/registry/<resource>/"
// prefixes), prev_kv on, and 100 writes in flight over 10 channels, each a
// Txn (as the apiserver writes) updating one of --objects objects a
// resource, so most events carry a prev_kv. Any flag after it overrides.
//
// Threads: gRPC's callback API (its own small pool) plus one pacing thread;
// no thread per stream. Bounded: at most --max-puts puts, --seconds of load,
// --create-timeout and --drain-seconds of waiting. Loopback endpoints only.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/grpc_client.h"
#include "common/histogram.h"
#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

using bench::Histogram;
using bench::now_ns;
using bench::SignedHistogram;

// ---- options -------------------------------------------------------------

struct Options {
  std::vector<std::string> endpoints{"127.0.0.1:2379"};
  int streams = 100;
  int watchers = 10000;
  int prefixes = 100;
  double rate = 1000;  // puts/s; 0 = as fast as possible
  double seconds = 10;
  int value_size = 256;
  int watch_channels = 4;
  int put_channels = 1;
  int concurrency = 64;     // puts in flight when rate == 0
  int max_inflight = 4096;  // cap on puts in flight when paced
  int64_t max_puts = 2'000'000;
  double create_timeout = 60;
  double drain_seconds = 10;
  std::string json;
  std::string label;
  bool prev_kv = false;  // watchers ask for prev_kv
  bool txn = false;      // writes are Txns with one put
  int objects = 0;       // keys a prefix cycles over; 0: a new key each write
  bool k8s = false;      // --shape k8s: resource prefixes
};

// kube-apiserver's resources, as its registry prefixes them.
const char* const kK8sResources[] = {
    "pods", "services/specs", "services/endpoints", "endpointslices", "configmaps", "secrets", "events",
    "leases", "nodes", "namespaces", "deployments", "replicasets", "daemonsets", "statefulsets", "jobs",
    "serviceaccounts", "persistentvolumeclaims", "persistentvolumes", "roles", "rolebindings"};
constexpr int kK8sResourceCount = sizeof(kK8sResources) / sizeof(kK8sResources[0]);

void usage() {
  std::fprintf(stderr,
               "usage: etcdq_watch_bench [--endpoints 127.0.0.1:2379[,host:port...]] [--streams 100]\n"
               "  [--watchers 10000] [--prefixes 100] [--rate 1000 (0 = max)] [--seconds 10]\n"
               "  [--value-size 256] [--watch-channels 4] [--put-channels 1] [--concurrency 64]\n"
               "  [--max-inflight 4096] [--max-puts 2000000] [--create-timeout 60]\n"
               "  [--drain-seconds 10] [--json out.json] [--label name]\n"
               "  [--prev-kv] [--txn] [--objects N (keys a prefix cycles over; 0 = a new key a write)]\n"
               "  [--shape fanout|k8s (k8s: --streams 1 --watchers 20 --prefixes 20 --prev-kv --txn\n"
               "   --objects 500 --rate 0 --concurrency 100 --put-channels 10, /registry/<resource>/ keys)]\n");
}

bool parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "-h" || a == "--help") return false;
    if (a == "--prev-kv" || a == "--txn") {  // switches, no value
      (a == "--prev-kv" ? o->prev_kv : o->txn) = true;
      continue;
    }
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      std::fprintf(stderr, "missing value for %s\n", a.c_str());
      return false;
    }
    try {
      if (a == "--endpoints") {
        o->endpoints.clear();
        std::stringstream ss(v);
        std::string e;
        while (std::getline(ss, e, ','))
          if (!e.empty()) o->endpoints.push_back(e);
      } else if (a == "--streams") o->streams = std::stoi(v);
      else if (a == "--watchers") o->watchers = std::stoi(v);
      else if (a == "--prefixes") o->prefixes = std::stoi(v);
      else if (a == "--rate") o->rate = std::stod(v);
      else if (a == "--seconds") o->seconds = std::stod(v);
      else if (a == "--value-size") o->value_size = std::stoi(v);
      else if (a == "--watch-channels") o->watch_channels = std::stoi(v);
      else if (a == "--put-channels") o->put_channels = std::stoi(v);
      else if (a == "--concurrency") o->concurrency = std::stoi(v);
      else if (a == "--max-inflight") o->max_inflight = std::stoi(v);
      else if (a == "--max-puts") o->max_puts = std::stoll(v);
      else if (a == "--create-timeout") o->create_timeout = std::stod(v);
      else if (a == "--drain-seconds") o->drain_seconds = std::stod(v);
      else if (a == "--json") o->json = v;
      else if (a == "--label") o->label = v;
      else if (a == "--objects") o->objects = std::stoi(v);
      else if (a == "--shape") {
        if (v == "k8s") {
          o->k8s = o->prev_kv = o->txn = true;
          o->streams = 1;
          o->watchers = o->prefixes = kK8sResourceCount;
          o->objects = 500;
          o->rate = 0;
          o->concurrency = 100;
          o->put_channels = 10;
        } else if (v != "fanout") {
          std::fprintf(stderr, "--shape must be fanout or k8s\n");
          return false;
        }
      } else {
        std::fprintf(stderr, "unknown flag %s\n", a.c_str());
        return false;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "bad value for %s: %s\n", a.c_str(), v.c_str());
      return false;
    }
  }
  auto bad = [](const char* m) {
    std::fprintf(stderr, "%s\n", m);
    return false;
  };
  if (o->endpoints.empty()) return bad("--endpoints is empty");
  if (o->streams < 1 || o->streams > 100'000) return bad("--streams must be 1..100000");
  if (o->watchers < 1 || o->watchers > 10'000'000) return bad("--watchers must be 1..10000000");
  if (o->prefixes < 1 || o->prefixes > o->watchers) return bad("--prefixes must be 1..watchers");
  if (o->rate < 0 || o->rate > 10'000'000) return bad("--rate must be 0..10000000");
  if (o->seconds <= 0 || o->seconds > 3600) return bad("--seconds must be in (0, 3600]");
  if (o->value_size < 16 || o->value_size > (1 << 20)) return bad("--value-size must be 16..1048576");
  if (o->watch_channels < 1 || o->watch_channels > 1024) return bad("--watch-channels must be 1..1024");
  if (o->put_channels < 1 || o->put_channels > 1024) return bad("--put-channels must be 1..1024");
  if (o->concurrency < 1 || o->concurrency > 100'000) return bad("--concurrency must be 1..100000");
  if (o->max_inflight < 1 || o->max_inflight > 1'000'000) return bad("--max-inflight must be 1..1000000");
  if (o->max_puts < 1 || o->max_puts > 100'000'000) return bad("--max-puts must be 1..100000000");
  if (o->create_timeout <= 0 || o->drain_seconds < 0) return bad("bad timeout");
  if (o->objects < 0 || o->objects > 10'000'000) return bad("--objects must be 0..10000000");
  if (o->streams > o->watchers) o->streams = o->watchers;
  return true;
}

// ---- shared state --------------------------------------------------------

Options g_opt;

// One slot per revision after the base revision, filled by the Put's
// response callback. ack_ns is published last (release), so a reader that
// sees it non-zero also sees put_index.
struct RevSlot {
  std::atomic<int64_t> ack_ns{0};
  int64_t put_index = 0;
};
std::unique_ptr<RevSlot[]> g_slots;
int64_t g_slot_count = 0;
std::atomic<int64_t> g_base_rev{0};
std::atomic<int64_t> g_put_start_ns{0};
std::atomic<int64_t> g_put_errors{0};
std::atomic<int64_t> g_unexpected_revs{0};  // a Put answered with a revision outside the table

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
uint64_t event_hash(int64_t rev, int64_t put_index) {
  return mix64(static_cast<uint64_t>(rev) * 0x100000001b3ULL ^ mix64(static_cast<uint64_t>(put_index)));
}

// Statistics of one gRPC callback thread; written only by that thread,
// read by main once every stream has finished (or `events` while running).
struct ThreadStats {
  std::atomic<uint64_t> events{0};
  uint64_t responses = 0;  // WatchResponses that carried events
  SignedHistogram commit_delay;  // receive - Put response, ns
  Histogram send_delay;          // receive - Put send, ns
  std::vector<uint64_t> per_second;
  std::vector<std::pair<int64_t, int64_t>> pending;  // (rev, receive ns) seen before the Put's response
  uint64_t unresolved = 0;                            // pending beyond the cap
};
constexpr size_t kMaxPendingPerThread = 2'000'000;
std::mutex g_stats_mu;
std::vector<std::unique_ptr<ThreadStats>> g_stats;

ThreadStats* thread_stats() {
  thread_local ThreadStats* ts = [] {
    auto p = std::make_unique<ThreadStats>();
    p->per_second.assign(static_cast<size_t>(g_opt.seconds + g_opt.drain_seconds) + 8, 0);
    std::lock_guard<std::mutex> lk(g_stats_mu);
    g_stats.push_back(std::move(p));
    return g_stats.back().get();
  }();
  return ts;
}

struct Watcher {
  int prefix = 0;
  int64_t watch_id = -1;
  int64_t last_rev = 0;
  int64_t count = 0;
  uint64_t hash = 0;
  int64_t out_of_order = 0;  // revision <= the previous one (duplicates too)
  int64_t wrong_event = 0;   // key outside the prefix, not a PUT, or a bad value
  bool canceled = false;
  std::string cancel_reason;
};
std::vector<Watcher> g_watchers;
std::vector<std::string> g_prefix_keys;

std::atomic<int64_t> g_created{0};
std::atomic<int64_t> g_create_failed{0};
std::atomic<int64_t> g_unknown_watch_events{0};

std::mutex g_done_mu;
std::condition_variable g_done_cv;
int g_streams_done = 0;

std::string prefix_end(const std::string& p) {
  std::string e = p;
  e.back() = static_cast<char>(e.back() + 1);  // prefixes end in '/', so no carry
  return e;
}

// ---- one Watch stream ----------------------------------------------------

class WatchStream final : public grpc::ClientBidiReactor<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse> {
 public:
  WatchStream(etcdserverpb::Watch::Stub* stub, std::vector<int> watchers) : watchers_(std::move(watchers)) {
    stub->async()->Watch(&ctx_, this);
    StartRead(&resp_);
    write_next();
    StartCall();
  }

  void cancel() { ctx_.TryCancel(); }
  bool done() const { return done_; }
  const grpc::Status& status() const { return status_; }
  void set_cancelling() { cancelling_.store(true); }
  bool cancelling() const { return cancelling_.load(); }

  // Create requests go one at a time (one write in flight per stream).
  void OnWriteDone(bool ok) override {
    if (ok) write_next();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // stream over; OnDone follows
    handle(resp_, now_ns());
    resp_.Clear();
    StartRead(&resp_);
  }

  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> lk(g_done_mu);
    status_ = s;
    done_ = true;
    ++g_streams_done;
    g_done_cv.notify_all();
  }

 private:
  void write_next() {
    if (next_write_ >= watchers_.size()) return;
    const Watcher& w = g_watchers[watchers_[next_write_++]];
    req_.Clear();
    auto* c = req_.mutable_create_request();
    c->set_key(g_prefix_keys[w.prefix]);
    c->set_range_end(prefix_end(g_prefix_keys[w.prefix]));
    c->set_prev_kv(g_opt.prev_kv);
    StartWrite(&req_);
  }

  void handle(const etcdserverpb::WatchResponse& r, int64_t recv_ns) {
    if (r.created()) {
      // Servers answer creates in request order on a stream (etcd's
      // v3rpc/watch.go sends them through one control channel), so the k-th
      // `created` belongs to the k-th create request.
      if (created_seen_ < watchers_.size()) {
        int w = watchers_[created_seen_++];
        g_watchers[w].watch_id = r.watch_id();
        if (r.canceled()) {
          g_watchers[w].canceled = true;
          g_watchers[w].cancel_reason = r.cancel_reason();
          g_create_failed.fetch_add(1);
        } else {
          by_id_[r.watch_id()] = w;
        }
        g_created.fetch_add(1, std::memory_order_relaxed);
      }
      return;
    }
    if (r.events_size() == 0 && !r.canceled()) return;  // progress notification
    auto it = by_id_.find(r.watch_id());
    if (it == by_id_.end()) {
      g_unknown_watch_events.fetch_add(r.events_size() + (r.canceled() ? 1 : 0));
      return;
    }
    Watcher& w = g_watchers[it->second];
    if (r.canceled()) {
      if (!cancelling()) {
        w.canceled = true;
        w.cancel_reason = r.cancel_reason();
      }
      return;
    }
    ThreadStats* ts = thread_stats();
    const std::string& prefix = g_prefix_keys[w.prefix];
    const int64_t base = g_base_rev.load(std::memory_order_relaxed);
    for (const auto& ev : r.events()) {
      const auto& kv = ev.kv();
      const int64_t rev = kv.mod_revision();
      if (rev <= w.last_rev) ++w.out_of_order;
      else w.last_rev = rev;
      ++w.count;
      int64_t send_ns = 0, put_index = -1;
      if (ev.type() != mvccpb::Event::PUT || kv.key().compare(0, prefix.size(), prefix) != 0 ||
          kv.value().size() < 16) {
        ++w.wrong_event;
      } else {
        std::memcpy(&send_ns, kv.value().data(), 8);
        std::memcpy(&put_index, kv.value().data() + 8, 8);
        ts->send_delay.add(static_cast<uint64_t>(std::max<int64_t>(0, recv_ns - send_ns)));
      }
      w.hash += event_hash(rev, put_index);
      const int64_t slot = rev - base - 1;
      if (slot >= 0 && slot < g_slot_count) {
        int64_t ack = g_slots[slot].ack_ns.load(std::memory_order_acquire);
        if (ack != 0) ts->commit_delay.add(recv_ns - ack);
        else if (ts->pending.size() < kMaxPendingPerThread) ts->pending.emplace_back(rev, recv_ns);
        else ++ts->unresolved;
      } else {
        ++ts->unresolved;
      }
    }
    int64_t start = g_put_start_ns.load(std::memory_order_relaxed);
    size_t sec = recv_ns > start ? static_cast<size_t>((recv_ns - start) / 1'000'000'000) : 0;
    if (sec < ts->per_second.size()) ts->per_second[sec] += r.events_size();
    ++ts->responses;
    ts->events.fetch_add(r.events_size(), std::memory_order_relaxed);
  }

  grpc::ClientContext ctx_;
  etcdserverpb::WatchRequest req_;
  etcdserverpb::WatchResponse resp_;
  std::vector<int> watchers_;
  size_t next_write_ = 0;                   // write side only
  size_t created_seen_ = 0;                 // read side only
  std::unordered_map<int64_t, int> by_id_;  // read side only
  std::atomic<bool> cancelling_{false};
  grpc::Status status_;
  bool done_ = false;  // under g_done_mu
};

// ---- puts ----------------------------------------------------------------

struct PutCall {
  grpc::ClientContext ctx;
  etcdserverpb::PutRequest req;
  etcdserverpb::PutResponse resp;
  etcdserverpb::TxnRequest txn_req;  // --txn: the put inside a Txn
  etcdserverpb::TxnResponse txn_resp;
  bool txn = false;
  int64_t index = 0;
  int64_t revision() const { return txn ? txn_resp.header().revision() : resp.header().revision(); }
};

std::mutex g_put_mu;
std::condition_variable g_put_cv;
int64_t g_inflight = 0;  // under g_put_mu
std::atomic<int64_t> g_acked{0};
std::string g_put_error_sample;  // under g_put_mu

void put_done(PutCall* c, const grpc::Status& s) {
  const int64_t ack = now_ns();
  if (s.ok()) {
    const int64_t slot = c->revision() - g_base_rev.load() - 1;
    if (slot >= 0 && slot < g_slot_count) {
      g_slots[slot].put_index = c->index;
      g_slots[slot].ack_ns.store(ack, std::memory_order_release);
      g_acked.fetch_add(1, std::memory_order_relaxed);
    } else {
      g_unexpected_revs.fetch_add(1);
    }
  } else {
    g_put_errors.fetch_add(1);
  }
  {
    std::lock_guard<std::mutex> lk(g_put_mu);
    if (!s.ok() && g_put_error_sample.empty()) g_put_error_sample = s.error_message();
    --g_inflight;
  }
  g_put_cv.notify_all();
  delete c;
}

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  if (!parse_args(argc, argv, &g_opt)) {
    usage();
    return 2;
  }
  const Options& o = g_opt;
  std::vector<std::string> targets;
  for (const auto& e : o.endpoints) {
    std::string t;
    if (!bench::loopback_target(e, &t)) {
      std::fprintf(stderr, "endpoint %s: only loopback host:port endpoints are allowed\n", e.c_str());
      return 2;
    }
    targets.push_back(t);
  }

  // Channels: watch channels and put channels, round-robin over endpoints.
  std::vector<std::shared_ptr<grpc::Channel>> watch_ch, put_ch;
  int channel_id = 0;
  for (int i = 0; i < o.watch_channels; ++i) watch_ch.push_back(bench::make_channel(targets[i % targets.size()], channel_id++));
  for (int i = 0; i < o.put_channels; ++i) put_ch.push_back(bench::make_channel(targets[i % targets.size()], channel_id++));
  for (auto& ch : watch_ch) {
    if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      std::fprintf(stderr, "cannot connect to %s\n", o.endpoints[0].c_str());
      return 2;
    }
  }
  std::vector<std::unique_ptr<etcdserverpb::Watch::Stub>> watch_stubs;
  std::vector<std::unique_ptr<etcdserverpb::KV::Stub>> kv_stubs;
  for (auto& ch : watch_ch) watch_stubs.push_back(etcdserverpb::Watch::NewStub(ch));
  for (auto& ch : put_ch) kv_stubs.push_back(etcdserverpb::KV::NewStub(ch));

  for (int p = 0; p < o.prefixes; ++p) {
    if (o.k8s) {
      g_prefix_keys.push_back(std::string("/registry/") + kK8sResources[p % kK8sResourceCount] + "/" +
                              (p < kK8sResourceCount ? "" : std::to_string(p / kK8sResourceCount) + "/"));
    } else {
      g_prefix_keys.push_back("/fan/" + std::to_string(p) + "/");
    }
  }
  g_watchers.resize(o.watchers);
  // Watchers in contiguous blocks per stream, so that each stream carries
  // every prefix (with the defaults: 100 watchers, one per prefix).
  std::vector<std::vector<int>> per_stream(o.streams);
  for (int i = 0; i < o.watchers; ++i) {
    g_watchers[i].prefix = i % o.prefixes;
    per_stream[static_cast<int64_t>(i) * o.streams / o.watchers].push_back(i);
  }

  // ---- phase 1: create every watcher ----
  const int64_t t_create = now_ns();
  std::vector<WatchStream*> streams;
  for (int s = 0; s < o.streams; ++s)
    streams.push_back(new WatchStream(watch_stubs[s % watch_stubs.size()].get(), std::move(per_stream[s])));
  const auto create_deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.create_timeout * 1000));
  while (g_created.load() < o.watchers && Clock::now() < create_deadline) {
    {
      std::lock_guard<std::mutex> lk(g_done_mu);
      if (g_streams_done > 0) break;  // a stream failed before all were created
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int64_t created = g_created.load();
  const double create_s = (now_ns() - t_create) / 1e9;
  bool setup_ok = created == o.watchers && g_create_failed.load() == 0;
  if (!setup_ok)
    std::fprintf(stderr, "only %" PRId64 " of %d watchers created (%" PRId64 " refused) after %.1f s\n", created,
                 o.watchers, g_create_failed.load(), create_s);

  // ---- phase 2: puts ----
  int64_t issued = 0, put_start = 0, put_end = 0, acks_done = 0;
  if (setup_ok) {
    // The base revision: every put of this run gets a revision above it.
    {
      etcdserverpb::RangeRequest rq;
      etcdserverpb::RangeResponse rs;
      rq.set_key(g_prefix_keys[0]);
      rq.set_limit(1);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      grpc::Status st = kv_stubs[0]->Range(&ctx, rq, &rs);
      if (!st.ok()) {
        std::fprintf(stderr, "range for the base revision failed: %s\n", st.error_message().c_str());
        setup_ok = false;
      }
      g_base_rev.store(rs.header().revision());
    }
    int64_t expected_puts = o.rate > 0 ? static_cast<int64_t>(o.rate * o.seconds * 1.05) + 1000 : o.max_puts;
    g_slot_count = std::min(o.max_puts, expected_puts) + 16;
    g_slots.reset(new RevSlot[g_slot_count]);
    const int64_t limit_puts = g_slot_count - 16;
    const int64_t limit_inflight = o.rate > 0 ? o.max_inflight : o.concurrency;
    const std::string filler(o.value_size - 16, 'x');

    put_start = now_ns();
    g_put_start_ns.store(put_start);
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::nanoseconds(static_cast<int64_t>(o.seconds * 1e9));
    while (setup_ok && issued < limit_puts) {
      auto now = Clock::now();
      if (now >= end) break;
      if (o.rate > 0) {
        auto due = t0 + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(issued) * 1e9 / o.rate));
        if (due > now) {
          std::this_thread::sleep_until(std::min(due, end));
          continue;
        }
      }
      {
        std::unique_lock<std::mutex> lk(g_put_mu);
        if (!g_put_cv.wait_until(lk, end, [&] { return g_inflight < limit_inflight; })) break;
        ++g_inflight;
      }
      auto* c = new PutCall;
      c->index = issued;
      const int64_t send = now_ns();
      std::string value(16, '\0');
      std::memcpy(value.data(), &send, 8);
      std::memcpy(value.data() + 8, &issued, 8);
      value += filler;
      const std::string& prefix = g_prefix_keys[issued % o.prefixes];
      if (o.objects > 0) {
        // kube's keys: /registry/<resource>/<namespace>/<name>.
        int64_t obj = (issued / o.prefixes) % o.objects;
        c->req.set_key(prefix + "ns" + std::to_string(obj % 10) + "/o" + std::to_string(obj));
      } else {
        c->req.set_key(prefix + "k" + std::to_string(issued));
      }
      c->req.set_value(std::move(value));
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      auto* stub = kv_stubs[issued % kv_stubs.size()].get();
      if (o.txn) {
        c->txn = true;
        *c->txn_req.add_success()->mutable_request_put() = std::move(c->req);
        stub->async()->Txn(&c->ctx, &c->txn_req, &c->txn_resp, [c](grpc::Status s) { put_done(c, s); });
      } else {
        stub->async()->Put(&c->ctx, &c->req, &c->resp, [c](grpc::Status s) { put_done(c, s); });
      }
      ++issued;
    }
    put_end = now_ns();
    {
      std::unique_lock<std::mutex> lk(g_put_mu);
      g_put_cv.wait_for(lk, std::chrono::seconds(15), [] { return g_inflight == 0; });
    }
    acks_done = now_ns();
  }

  // ---- phase 3: wait until the expected events have arrived ----
  // Expected per prefix, from the Put responses.
  std::vector<int64_t> exp_count(o.prefixes, 0);
  std::vector<uint64_t> exp_hash(o.prefixes, 0);
  for (int64_t k = 0; setup_ok && k < g_slot_count; ++k) {
    if (g_slots[k].ack_ns.load(std::memory_order_acquire) == 0) continue;
    int64_t pi = g_slots[k].put_index;
    int p = static_cast<int>(pi % o.prefixes);
    ++exp_count[p];
    exp_hash[p] += event_hash(g_base_rev.load() + 1 + k, pi);
  }
  uint64_t expected_events = 0;
  for (const auto& w : g_watchers) expected_events += exp_count[w.prefix];
  auto received_now = [] {
    std::lock_guard<std::mutex> lk(g_stats_mu);
    uint64_t n = 0;
    for (auto& t : g_stats) n += t->events.load(std::memory_order_relaxed);
    return n;
  };
  const auto drain_deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.drain_seconds * 1000));
  while (setup_ok && received_now() < expected_events && Clock::now() < drain_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const int64_t drained = now_ns();

  // ---- shut down: cancel every stream, wait for all of them ----
  for (auto* s : streams) {
    s->set_cancelling();
    s->cancel();
  }
  int bad_streams = 0;
  std::string stream_error;
  {
    std::unique_lock<std::mutex> lk(g_done_mu);
    if (!g_done_cv.wait_for(lk, std::chrono::seconds(30), [&] { return g_streams_done == o.streams; })) {
      std::fprintf(stderr, "streams did not finish after cancel; giving up\n");
      std::_Exit(3);
    }
    for (auto* s : streams)
      if (s->status().error_code() != grpc::StatusCode::CANCELLED) {
        ++bad_streams;
        if (stream_error.empty()) stream_error = s->status().error_message();
      }
  }
  for (auto* s : streams) delete s;
  streams.clear();

  // ---- results ----
  SignedHistogram commit_delay;
  Histogram send_delay;
  std::vector<uint64_t> per_second(static_cast<size_t>(o.seconds + o.drain_seconds) + 8, 0);
  uint64_t received = 0, unresolved = 0, before_ack = 0, responses = 0;
  for (auto& t : g_stats) {
    received += t->events.load();
    responses += t->responses;
    for (auto [rev, recv] : t->pending) {
      int64_t slot = rev - g_base_rev.load() - 1;
      int64_t ack = g_slots[slot].ack_ns.load(std::memory_order_acquire);
      if (ack == 0) {
        ++unresolved;
        continue;
      }
      ++before_ack;
      t->commit_delay.add(recv - ack);
    }
    unresolved += t->unresolved;
    commit_delay.merge(t->commit_delay);
    send_delay.merge(t->send_delay);
    for (size_t i = 0; i < per_second.size(); ++i) per_second[i] += t->per_second[i];
  }
  int64_t starved = 0, missing = 0, extra = 0, out_of_order = 0, wrong_event = 0, hash_mismatch = 0, canceled = 0;
  std::string cancel_reason;
  for (const auto& w : g_watchers) {
    int64_t e = exp_count[w.prefix];
    if (w.count < e) {
      ++starved;
      missing += e - w.count;
    }
    if (w.count > e) extra += w.count - e;
    out_of_order += w.out_of_order;
    wrong_event += w.wrong_event;
    if (w.count == e && w.hash != exp_hash[w.prefix]) ++hash_mismatch;
    if (w.canceled) {
      ++canceled;
      if (cancel_reason.empty()) cancel_reason = w.cancel_reason;
    }
  }
  // The last second bucket with events marks the end of delivery.
  size_t last_sec = 0;
  for (size_t i = 0; i < per_second.size(); ++i)
    if (per_second[i]) last_sec = i;
  uint64_t peak = 0, in_put_phase = 0;
  for (size_t i = 0; i < per_second.size(); ++i) {
    peak = std::max(peak, per_second[i]);
    if (static_cast<double>(i) < o.seconds) in_put_phase += per_second[i];
  }
  const double put_s = (put_end - put_start) / 1e9;
  const double delivery_s = (drained - put_start) / 1e9;
  const int64_t acked = g_acked.load();
  const double puts_per_s = put_s > 0 ? static_cast<double>(acked) / put_s : 0;
  // Delivered rate over the whole run: from the first put to the moment the
  // last expected event arrived (or the drain timeout).
  const double events_per_s = delivery_s > 0 ? static_cast<double>(received) / delivery_s : 0;
  const double events_per_s_put_phase = put_s > 0 ? static_cast<double>(in_put_phase) / std::min(put_s, o.seconds) : 0;
  const int64_t violations = missing + extra + out_of_order + wrong_event + hash_mismatch + canceled +
                             g_unknown_watch_events.load() + g_unexpected_revs.load();
  const bool ok = setup_ok && violations == 0 && starved == 0 && g_put_errors.load() == 0 && bad_streams == 0;
  const double cpu_s = bench::process_cpu_seconds();

  std::printf("etcdq_watch_bench %s\n", o.label.c_str());
  std::printf("  endpoints %s, %d streams on %d channels, %d watchers on %d prefixes%s, rate %s, %.0f s, value %d B%s\n",
              o.endpoints[0].c_str(), o.streams, o.watch_channels, o.watchers, o.prefixes,
              o.prev_kv ? " (prev_kv)" : "",
              o.rate > 0 ? std::to_string(static_cast<int64_t>(o.rate)).c_str()
                         : ("max (" + std::to_string(o.concurrency) + " in flight)").c_str(),
              o.seconds, o.value_size, o.txn ? ", txn writes" : "");
  std::printf("  %-34s %12.2f s\n", "watchers created in", create_s);
  std::printf("  %-34s %12" PRId64 " (%" PRId64 " errors)\n", "puts acknowledged", acked, g_put_errors.load());
  std::printf("  %-34s %12.0f\n", "puts/s achieved", puts_per_s);
  std::printf("  %-34s %12" PRIu64 " of %" PRIu64 " expected\n", "events delivered", received, expected_events);
  std::printf("  %-34s %12" PRIu64 " (%.2f events each)\n", "watch responses with events", responses,
              responses ? static_cast<double>(received) / static_cast<double>(responses) : 0.0);
  std::printf("  %-34s %12.0f\n", "events/s delivered (whole run)", events_per_s);
  std::printf("  %-34s %12.0f\n", "events/s delivered (put phase)", events_per_s_put_phase);
  std::printf("  %-34s %12" PRIu64 "\n", "events/s delivered (peak second)", peak);
  std::printf("  %-34s %12.2f s after the last put was acked\n", "delivery finished", (drained - acks_done) / 1e9);
  std::printf("  %-34s %8s %8s %8s %8s\n", "delay (ms)", "p50", "p90", "p99", "max");
  std::printf("  %-34s %8.2f %8.2f %8.2f %8.2f\n", "  commit (Put response) -> delivery", ms(commit_delay.quantile(0.5)),
              ms(commit_delay.quantile(0.9)), ms(commit_delay.quantile(0.99)), ms(commit_delay.max()));
  std::printf("  %-34s %8.2f %8.2f %8.2f %8.2f\n", "  send -> delivery", ms(send_delay.quantile(0.5)),
              ms(send_delay.quantile(0.9)), ms(send_delay.quantile(0.99)), ms(send_delay.max()));
  std::printf("  %-34s %12" PRIu64 " (%.1f %%)\n", "events before their Put response", before_ack,
              received ? 100.0 * static_cast<double>(before_ack) / static_cast<double>(received) : 0.0);
  std::printf("  %-34s %12" PRId64 " (missing events %" PRId64 ")\n", "watchers starved", starved, missing);
  std::printf("  %-34s %12" PRId64 " (extra %" PRId64 ", out of order %" PRId64 ", wrong %" PRId64
              ", hash %" PRId64 ", canceled %" PRId64 ", unknown watch %" PRId64 ", unexpected rev %" PRId64 ")\n",
              "violations", violations, extra, out_of_order, wrong_event, hash_mismatch, canceled,
              g_unknown_watch_events.load(), g_unexpected_revs.load());
  if (unresolved) std::printf("  %-34s %12" PRIu64 "\n", "events without a delay sample", unresolved);
  if (!cancel_reason.empty()) std::printf("  cancel reason: %s\n", cancel_reason.c_str());
  if (bad_streams) std::printf("  %d streams ended with an error: %s\n", bad_streams, stream_error.c_str());
  if (g_put_errors.load()) std::printf("  put error: %s\n", g_put_error_sample.c_str());
  std::printf("  %-34s %12.2f s\n", "client CPU", cpu_s);
  std::printf("  per second:");
  for (size_t i = 0; i <= last_sec; ++i) std::printf(" %" PRIu64, per_second[i]);
  std::printf("\n  result: %s\n", ok ? "OK" : "FAILED");

  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\n"
      << "  \"label\": \"" << o.label << "\",\n"
      << "  \"endpoints\": \"" << o.endpoints[0] << (o.endpoints.size() > 1 ? ",..." : "") << "\",\n"
      << "  \"streams\": " << o.streams << ", \"watchers\": " << o.watchers << ", \"prefixes\": " << o.prefixes
      << ", \"rate\": " << o.rate << ", \"seconds\": " << o.seconds << ", \"value_size\": " << o.value_size
      << ", \"concurrency\": " << o.concurrency << ", \"watch_channels\": " << o.watch_channels
      << ", \"shape\": \"" << (o.k8s ? "k8s" : "fanout") << "\", \"prev_kv\": " << (o.prev_kv ? "true" : "false")
      << ", \"txn\": " << (o.txn ? "true" : "false") << ", \"objects\": " << o.objects << ",\n"
      << "  \"create_seconds\": " << create_s << ",\n"
      << "  \"puts_acked\": " << acked << ", \"put_errors\": " << g_put_errors.load()
      << ", \"puts_per_s\": " << puts_per_s << ",\n"
      << "  \"events_expected\": " << expected_events << ", \"events_delivered\": " << received
      << ", \"watch_responses\": " << responses << ", \"events_per_response\": "
      << (responses ? static_cast<double>(received) / static_cast<double>(responses) : 0.0) << ",\n"
      << "  \"events_per_s\": " << events_per_s << ", \"events_per_s_put_phase\": " << events_per_s_put_phase
      << ", \"events_per_s_peak_second\": " << peak << ",\n"
      << "  \"commit_delay_ms\": {\"p50\": " << ms(commit_delay.quantile(0.5)) << ", \"p90\": "
      << ms(commit_delay.quantile(0.9)) << ", \"p99\": " << ms(commit_delay.quantile(0.99)) << ", \"max\": "
      << ms(commit_delay.max()) << "},\n"
      << "  \"send_delay_ms\": {\"p50\": " << ms(send_delay.quantile(0.5)) << ", \"p90\": "
      << ms(send_delay.quantile(0.9)) << ", \"p99\": " << ms(send_delay.quantile(0.99)) << ", \"max\": "
      << ms(send_delay.max()) << "},\n"
      << "  \"events_before_put_response\": " << before_ack << ", \"events_without_delay\": " << unresolved << ",\n"
      << "  \"watchers_starved\": " << starved << ", \"missing_events\": " << missing << ",\n"
      << "  \"violations\": {\"total\": " << violations << ", \"extra\": " << extra << ", \"out_of_order\": "
      << out_of_order << ", \"wrong_event\": " << wrong_event << ", \"hash_mismatch\": " << hash_mismatch
      << ", \"canceled\": " << canceled << ", \"unknown_watch\": " << g_unknown_watch_events.load()
      << ", \"unexpected_revision\": " << g_unexpected_revs.load() << "},\n"
      << "  \"stream_errors\": " << bad_streams << ", \"client_cpu_seconds\": " << cpu_s << ",\n"
      << "  \"per_second\": [";
    for (size_t i = 0; i <= last_sec; ++i) f << (i ? ", " : "") << per_second[i];
    f << "],\n  \"ok\": " << (ok ? "true" : "false") << "\n}\n";
  }
  return ok ? 0 : 1;
}
