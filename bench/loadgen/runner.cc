#include "loadgen/runner.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "common/grpc_client.h"

namespace loadgen {
namespace {

// Statistics of one thread for one run; written only by that thread, read by
// the main thread after every client has stopped.
struct ThreadStats {
  std::vector<OpResult> ops;
  std::map<std::string, int64_t> error_counts;
};

class Run {
 public:
  Run(Workload* w, const Options& o) : w_(w), o_(o), names_(w->op_names()) {
    limit_ = o.total > 0 ? o.total : INT64_MAX;
    if (w->max_requests() >= 0) limit_ = std::min(limit_, w->max_requests());
    generation_ = next_generation_.fetch_add(1) + 1;
  }

  WorkloadResult go(const std::string& name) {
    WorkloadResult r;
    r.workload = name;
    const double cpu0 = bench::process_cpu_seconds();
    start_ns_ = bench::now_ns();
    end_ns_ = o_.total > 0 ? INT64_MAX : start_ns_ + static_cast<int64_t>(o_.seconds * 1e9);
    running_ = o_.clients;
    for (int c = 0; c < o_.clients; ++c) next(c);
    int64_t last_print = start_ns_, last_count = 0;
    std::unique_lock<std::mutex> lk(mu_);
    while (running_ > 0) {
      cv_.wait_for(lk, std::chrono::milliseconds(10));
      // Clients whose requests failed inline, deep in a chain of inline
      // failures, continue from here so that the stack stays bounded.
      while (!deferred_.empty()) {
        int c = deferred_.front();
        deferred_.pop_front();
        lk.unlock();
        next(c);
        lk.lock();
      }
      const int64_t now = bench::now_ns();
      if (o_.progress && now - last_print >= 1'000'000'000) {
        const int64_t n = answered_.load(std::memory_order_relaxed);
        std::fprintf(stderr, "  %-16s %6.1f s %10lld done %9.0f req/s  errors %lld\n", name.c_str(),
                     (now - start_ns_) / 1e9, static_cast<long long>(n),
                     static_cast<double>(n - last_count) * 1e9 / static_cast<double>(now - last_print),
                     static_cast<long long>(errors_.load()));
        last_print = now;
        last_count = n;
      }
    }
    lk.unlock();
    r.seconds = (last_answer_ns_.load() - start_ns_) / 1e9;
    r.client_cpu_s = bench::process_cpu_seconds() - cpu0;
    r.requests = answered_.load();
    r.errors = errors_.load();
    r.requests_per_s = r.seconds > 0 ? static_cast<double>(r.requests) / r.seconds : 0;
    r.ops.resize(names_.size());
    for (size_t i = 0; i < names_.size(); ++i) r.ops[i].name = names_[i];
    for (auto& t : threads_) {
      for (size_t i = 0; i < t->ops.size(); ++i) {
        r.ops[i].latency_ns.merge(t->ops[i].latency_ns);
        r.ops[i].errors += t->ops[i].errors;
      }
      for (auto& [m, n] : t->error_counts) r.error_counts[m] += n;
    }
    return r;
  }

 private:
  ThreadStats* stats() {
    thread_local int gen = 0;
    thread_local ThreadStats* ts = nullptr;
    if (gen != generation_) {
      auto p = std::make_unique<ThreadStats>();
      p->ops.resize(names_.size());
      std::lock_guard<std::mutex> lk(mu_);
      threads_.push_back(std::move(p));
      ts = threads_.back().get();
      gen = generation_;
    }
    return ts;
  }

  // Starts client c's next request, or retires the client.
  void next(int c) {
    const int64_t seq = issued_.fetch_add(1, std::memory_order_relaxed);
    if (seq >= limit_ || bench::now_ns() >= end_ns_) {
      std::lock_guard<std::mutex> lk(mu_);
      if (--running_ == 0) cv_.notify_all();
      return;
    }
    const int64_t t0 = bench::now_ns();
    thread_local int depth = 0;
    ++depth;
    w_->issue(c, seq, [this, c, t0](Outcome out) {
      const int64_t t1 = bench::now_ns();
      ThreadStats* ts = stats();
      if (out.op < 0 || static_cast<size_t>(out.op) >= ts->ops.size()) out.op = 0;
      if (out.error.empty()) {
        ts->ops[out.op].latency_ns.add(static_cast<uint64_t>(t1 - t0));
      } else {
        ++ts->ops[out.op].errors;
        errors_.fetch_add(1, std::memory_order_relaxed);
        if (ts->error_counts.size() < 20 || ts->error_counts.count(out.error)) ++ts->error_counts[out.error];
      }
      answered_.fetch_add(1, std::memory_order_relaxed);
      int64_t prev = last_answer_ns_.load(std::memory_order_relaxed);
      while (prev < t1 && !last_answer_ns_.compare_exchange_weak(prev, t1, std::memory_order_relaxed)) {
      }
      if (depth > 16) {
        std::lock_guard<std::mutex> lk(mu_);
        deferred_.push_back(c);
        cv_.notify_all();
      } else {
        next(c);
      }
    });
    --depth;
  }

  Workload* w_;
  const Options& o_;
  std::vector<std::string> names_;
  int64_t limit_ = 0, start_ns_ = 0, end_ns_ = 0;
  int generation_ = 0;
  static std::atomic<int> next_generation_;
  std::atomic<int64_t> issued_{0}, answered_{0}, errors_{0}, last_answer_ns_{0};
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  int running_ = 0;
  std::deque<int> deferred_;
  std::vector<std::unique_ptr<ThreadStats>> threads_;
};

std::atomic<int> Run::next_generation_{0};

}  // namespace

WorkloadResult run_workload(const std::string& name, Workload* w, const Options& o) {
  std::string error;
  if (!w->prepare(&error)) {
    WorkloadResult r;
    r.workload = name;
    r.setup_error = error.empty() ? "prepare failed" : error;
    return r;
  }
  Run run(w, o);
  WorkloadResult r = run.go(name);
  r.violations = w->finish(&r.checks);
  return r;
}

}  // namespace loadgen
