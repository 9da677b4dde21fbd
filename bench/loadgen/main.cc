// etcdq_loadgen: a closed-loop load generator for any etcd v3 server.
//
// --conns gRPC channels (each its own TCP connection, round-robin over
// --endpoints), --clients requests in flight, each client issuing its next
// request when the last one is answered. Workloads (--workload a,b,...) run
// one after another: put, range, txn-put, delete, lease-keepalive, k8s (see
// bench/README.md). Prints a table (latency p50/p90/p99/p99.9/max per
// operation), writes --json, and exits 1 if any request failed or any
// answer was wrong, 2 on bad usage or no connection.
//
// Threads: gRPC's callback threads issue the requests; the main thread
// prints progress. Loopback endpoints only.
#include <cstdio>

#include "common/grpc_client.h"
#include "loadgen/options.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "loadgen/workload.h"

namespace loadgen {
std::unique_ptr<Workload> make_kv_workload(const std::string& name, const Options& o, Connections* c);
std::unique_ptr<Workload> make_lease_workload(const Options& o, Connections* c);
std::unique_ptr<Workload> make_k8s_workload(const Options& o, Connections* c);

std::unique_ptr<Workload> make_workload(const std::string& name, const Options& o, Connections* c) {
  if (name == "lease-keepalive") return make_lease_workload(o, c);
  if (name == "k8s") return make_k8s_workload(o, c);
  return make_kv_workload(name, o, c);
}
}  // namespace loadgen

int main(int argc, char** argv) {
  loadgen::Options o;
  if (!loadgen::parse_options(argc, argv, &o)) return 2;
  loadgen::Connections conns;
  for (int i = 0; i < o.conns; ++i) {
    auto ch = bench::make_channel(o.targets[static_cast<size_t>(i) % o.targets.size()], i);
    if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      std::fprintf(stderr, "cannot connect to %s\n", o.targets[static_cast<size_t>(i) % o.targets.size()].c_str());
      return 2;
    }
    conns.kv.push_back(etcdserverpb::KV::NewStub(ch));
    conns.lease.push_back(etcdserverpb::Lease::NewStub(ch));
    conns.watch.push_back(etcdserverpb::Watch::NewStub(ch));
    conns.channels.push_back(std::move(ch));
  }
  std::vector<loadgen::WorkloadResult> results;
  bool ok = true;
  for (const auto& name : o.workloads) {
    auto w = loadgen::make_workload(name, o, &conns);
    results.push_back(loadgen::run_workload(name, w.get(), o));
    ok = ok && loadgen::result_ok(results.back());
  }
  loadgen::print_table(o, results);
  if (!o.json.empty() && !loadgen::write_json(o, results, o.json)) {
    std::fprintf(stderr, "cannot write %s\n", o.json.c_str());
    return 1;
  }
  return ok ? 0 : 1;
}
