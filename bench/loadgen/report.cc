#include "loadgen/report.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace loadgen {
namespace {

double ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

}  // namespace

bool result_ok(const WorkloadResult& r) {
  return r.setup_error.empty() && r.errors == 0 && r.violations == 0 && r.requests > 0;
}

void print_table(const Options& o, const std::vector<WorkloadResult>& results) {
  std::printf("etcdq_loadgen %s: %d conns, %d clients, %s\n", o.label.c_str(), o.conns, o.clients,
              o.total > 0 ? ("total " + std::to_string(o.total)).c_str()
                          : ("seconds " + std::to_string(static_cast<int64_t>(o.seconds))).c_str());
  std::printf("%-16s %-12s %10s %10s %8s %8s %8s %8s %8s %8s %8s\n", "workload", "op", "requests", "req/s", "errors",
              "avg ms", "p50", "p90", "p99", "p99.9", "max");
  for (const auto& r : results) {
    if (!r.setup_error.empty()) {
      std::printf("%-16s setup failed: %s\n", r.workload.c_str(), r.setup_error.c_str());
      continue;
    }
    std::printf("%-16s %-12s %10lld %10.0f %8lld\n", r.workload.c_str(), "(all)", static_cast<long long>(r.requests),
                r.requests_per_s, static_cast<long long>(r.errors));
    for (const auto& op : r.ops) {
      const auto& h = op.latency_ns;
      const double rate = r.seconds > 0 ? static_cast<double>(h.count() + op.errors) / r.seconds : 0;
      std::printf("%-16s %-12s %10lld %10.0f %8lld %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", "", op.name.c_str(),
                  static_cast<long long>(h.count() + op.errors), rate, static_cast<long long>(op.errors),
                  h.mean() / 1e6, ms(h.quantile(0.5)), ms(h.quantile(0.9)), ms(h.quantile(0.99)), ms(h.quantile(0.999)),
                  ms(h.max()));
    }
    for (const auto& [k, v] : r.checks) std::printf("%-16s   %s: %lld\n", "", k.c_str(), static_cast<long long>(v));
    if (r.violations) std::printf("%-16s   VIOLATIONS: %lld\n", "", static_cast<long long>(r.violations));
    for (const auto& [m, n] : r.error_counts)
      std::printf("%-16s   error x%lld: %s\n", "", static_cast<long long>(n), m.c_str());
    std::printf("%-16s   %.2f s, client CPU %.2f s, %s\n", "", r.seconds, r.client_cpu_s,
                result_ok(r) ? "OK" : "FAILED");
  }
}

bool write_json(const Options& o, const std::vector<WorkloadResult>& results, const std::string& path) {
  std::ostringstream f;
  bool all_ok = true;
  f << "{\n  \"label\": " << json_string(o.label) << ",\n  \"conns\": " << o.conns << ", \"clients\": " << o.clients
    << ", \"total\": " << o.total << ", \"seconds\": " << o.seconds << ", \"key_size\": " << o.key_size
    << ", \"value_size\": " << o.value_size << ",\n  \"workloads\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    all_ok = all_ok && result_ok(r);
    f << (i ? "," : "") << "\n    {\"workload\": " << json_string(r.workload)
      << ", \"ok\": " << (result_ok(r) ? "true" : "false") << ", \"setup_error\": " << json_string(r.setup_error)
      << ", \"requests\": " << r.requests << ", \"errors\": " << r.errors << ", \"violations\": " << r.violations
      << ", \"seconds\": " << r.seconds << ", \"requests_per_s\": " << r.requests_per_s
      << ", \"client_cpu_seconds\": " << r.client_cpu_s;
    bench::Histogram all;
    for (const auto& op : r.ops) all.merge(op.latency_ns);
    f << ",\n     \"all_ops\": {\"avg_ms\": " << all.mean() / 1e6 << ", \"p50_ms\": " << ms(all.quantile(0.5))
      << ", \"p90_ms\": " << ms(all.quantile(0.9)) << ", \"p99_ms\": " << ms(all.quantile(0.99))
      << ", \"p999_ms\": " << ms(all.quantile(0.999)) << ", \"max_ms\": " << ms(all.max()) << "}"
      << ",\n     \"ops\": [";
    for (size_t j = 0; j < r.ops.size(); ++j) {
      const auto& h = r.ops[j].latency_ns;
      f << (j ? ", " : "") << "{\"op\": " << json_string(r.ops[j].name) << ", \"ok\": " << h.count()
        << ", \"errors\": " << r.ops[j].errors << ", \"avg_ms\": " << h.mean() / 1e6
        << ", \"p50_ms\": " << ms(h.quantile(0.5)) << ", \"p90_ms\": " << ms(h.quantile(0.9))
        << ", \"p99_ms\": " << ms(h.quantile(0.99)) << ", \"p999_ms\": " << ms(h.quantile(0.999))
        << ", \"max_ms\": " << ms(h.max()) << "}";
    }
    f << "],\n     \"checks\": {";
    size_t k = 0;
    for (const auto& [name, v] : r.checks) f << (k++ ? ", " : "") << json_string(name) << ": " << v;
    f << "},\n     \"error_counts\": {";
    k = 0;
    for (const auto& [m, n] : r.error_counts) f << (k++ ? ", " : "") << json_string(m) << ": " << n;
    f << "}}";
  }
  f << "\n  ],\n  \"ok\": " << (all_ok ? "true" : "false") << "\n}\n";
  std::ofstream out(path);
  out << f.str();
  return static_cast<bool>(out);
}

}  // namespace loadgen
