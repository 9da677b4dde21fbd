// etcdq_loadgen's output: a table on stdout and, with --json, one JSON file
// holding every workload's results (latencies in milliseconds).
#pragma once

#include <string>
#include <vector>

#include "loadgen/options.h"
#include "loadgen/runner.h"

namespace loadgen {

// A result is OK when it ran, had no errors and no violations.
bool result_ok(const WorkloadResult& r);

void print_table(const Options& o, const std::vector<WorkloadResult>& results);

// False if the file cannot be written.
bool write_json(const Options& o, const std::vector<WorkloadResult>& results, const std::string& path);

}  // namespace loadgen
