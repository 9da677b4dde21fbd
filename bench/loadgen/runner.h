// Drives one workload: `clients` closed loops (each issues its next request
// when the previous one is answered) until `total` requests or `seconds`
// have passed, recording each request's latency (issue -> answer) per
// operation in per-thread histograms. Prints progress to stderr once a
// second while it runs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/histogram.h"
#include "loadgen/options.h"
#include "loadgen/workload.h"

namespace loadgen {

struct OpResult {
  std::string name;
  bench::Histogram latency_ns;  // successful requests only
  int64_t errors = 0;
};

struct WorkloadResult {
  std::string workload;
  int64_t requests = 0;  // answered, errors included
  int64_t errors = 0;    // requests that failed or answered wrongly
  int64_t violations = 0;
  double seconds = 0;  // first issue -> last answer
  double requests_per_s = 0;
  double client_cpu_s = 0;
  std::vector<OpResult> ops;
  std::map<std::string, int64_t> error_counts;  // by message (first 20 kinds)
  std::map<std::string, int64_t> checks;
  std::string setup_error;  // prepare() failed
};

// Runs `w` (already made over the connections) with the options' clients,
// total and seconds.
WorkloadResult run_workload(const std::string& name, Workload* w, const Options& o);

}  // namespace loadgen
