// etcdq_loadgen's command line. Sizes are bytes, times seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loadgen {

struct Options {
  std::vector<std::string> targets;    // loopback host:port, round-robin over channels
  std::vector<std::string> workloads;  // run one after another
  int conns = 100;                     // gRPC channels, each its own TCP connection
  int clients = 1000;                  // requests in flight (closed loop: one each)
  int64_t total = 0;                   // requests per workload; 0 = run for `seconds`
  double seconds = 5;                  // per workload when total == 0
  // put, txn-put, range, delete
  int key_size = 8;
  int value_size = 256;
  bool sequential_keys = false;
  int64_t key_space = 100000;
  std::string range_mode = "single";  // single | prefix
  int limit = 100;                    // range prefix: page size
  bool serializable = false;
  int64_t preload = 1000;     // keys written before range and delete runs
  bool skip_preload = false;  // range: the --preload keys are already there
  int64_t preload_start = 0;  // range: load keys [preload_start, preload) only
  // lease-keepalive
  int leases = 100;
  // k8s
  int k8s_namespaces = 10;
  int k8s_watchers = 4;
  int k8s_page = 50;
  double drain_seconds = 10;  // k8s: wait for watchers to catch up
  std::string json;
  std::string label;
  bool progress = true;
};

// Parses argv; prints usage and returns false on a bad or missing value.
bool parse_options(int argc, char** argv, Options* o);

}  // namespace loadgen
