#include "loadgen/options.h"

#include <cstdio>
#include <sstream>

#include "common/grpc_client.h"

namespace loadgen {
namespace {

void usage() {
  std::fprintf(stderr,
               "usage: etcdq_loadgen [--endpoints 127.0.0.1:2379[,...]] [--workload put[,range,...]]\n"
               "  workloads: put range txn-put delete lease-keepalive k8s\n"
               "  [--conns 100] [--clients 1000] [--total N | --seconds 5]\n"
               "  put/txn-put/range/delete: [--key-size 8] [--val-size 256] [--sequential-keys]\n"
               "    [--key-space 100000] [--range-mode single|prefix] [--limit 100]\n"
               "    [--consistency l|s] [--preload 1000] [--preload-start 0]\n"
               "    [--skip-preload]\n"
               "  lease-keepalive: [--leases 100]\n"
               "  k8s: [--k8s-namespaces 10] [--k8s-watchers 4] [--k8s-page 50] [--drain-seconds 10]\n"
               "  [--json out.json] [--label name] [--no-progress]\n");
}

}  // namespace

bool parse_options(int argc, char** argv, Options* o) {
  std::string endpoints = "127.0.0.1:2379";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "-h" || a == "--help") {
      usage();
      return false;
    }
    if (a == "--sequential-keys") {
      o->sequential_keys = true;
      continue;
    }
    if (a == "--skip-preload") {
      o->skip_preload = true;
      continue;
    }
    if (a == "--no-progress") {
      o->progress = false;
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
      usage();
      return false;
    }
    try {
      if (a == "--endpoints") endpoints = v;
      else if (a == "--workload" || a == "--workloads") {
        o->workloads.clear();
        std::stringstream ss(v);
        std::string w;
        while (std::getline(ss, w, ','))
          if (!w.empty()) o->workloads.push_back(w);
      } else if (a == "--conns") o->conns = std::stoi(v);
      else if (a == "--clients") o->clients = std::stoi(v);
      else if (a == "--total") o->total = std::stoll(v);
      else if (a == "--seconds") o->seconds = std::stod(v);
      else if (a == "--key-size") o->key_size = std::stoi(v);
      else if (a == "--val-size") o->value_size = std::stoi(v);
      else if (a == "--key-space") o->key_space = std::stoll(v);
      else if (a == "--range-mode") o->range_mode = v;
      else if (a == "--limit") o->limit = std::stoi(v);
      else if (a == "--consistency") {
        if (v != "l" && v != "s") throw std::invalid_argument(v);
        o->serializable = v == "s";
      } else if (a == "--preload") o->preload = std::stoll(v);
      else if (a == "--preload-start") o->preload_start = std::stoll(v);
      else if (a == "--leases") o->leases = std::stoi(v);
      else if (a == "--k8s-namespaces") o->k8s_namespaces = std::stoi(v);
      else if (a == "--k8s-watchers") o->k8s_watchers = std::stoi(v);
      else if (a == "--k8s-page") o->k8s_page = std::stoi(v);
      else if (a == "--drain-seconds") o->drain_seconds = std::stod(v);
      else if (a == "--json") o->json = v;
      else if (a == "--label") o->label = v;
      else {
        std::fprintf(stderr, "unknown flag %s\n", a.c_str());
        usage();
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
  if (!bench::parse_endpoints(endpoints, &o->targets)) return false;
  if (o->workloads.empty()) o->workloads = {"put"};
  for (const auto& w : o->workloads)
    if (w != "put" && w != "range" && w != "txn-put" && w != "delete" && w != "lease-keepalive" && w != "k8s") {
      std::fprintf(stderr, "unknown workload %s\n", w.c_str());
      return false;
    }
  if (o->conns < 1 || o->conns > 10000) return bad("--conns must be 1..10000");
  if (o->clients < 1 || o->clients > 100000) return bad("--clients must be 1..100000");
  if (o->total < 0 || o->total > 1'000'000'000) return bad("--total must be 0..1e9");
  if (o->seconds <= 0 || o->seconds > 86400) return bad("--seconds must be in (0, 86400]");
  if (o->key_size < 1 || o->key_size > 4096) return bad("--key-size must be 1..4096");
  if (o->value_size < 0 || o->value_size > (1 << 20)) return bad("--val-size must be 0..1048576");
  if (o->key_space < 1) return bad("--key-space must be >= 1");
  if (o->range_mode != "single" && o->range_mode != "prefix") return bad("--range-mode must be single or prefix");
  if (o->limit < 1) return bad("--limit must be >= 1");
  if (o->preload < 1 || o->preload > 100'000'000) return bad("--preload must be 1..1e8");
  if (o->preload_start < 0 || o->preload_start > o->preload) return bad("--preload-start must be 0..preload");
  if (o->leases < 1 || o->leases > 100000) return bad("--leases must be 1..100000");
  if (o->k8s_namespaces < 1 || o->k8s_watchers < 0 || o->k8s_page < 1) return bad("bad --k8s-* value");
  return true;
}

}  // namespace loadgen
