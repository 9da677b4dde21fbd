#include "common/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/metrics.h"

namespace etcdq::metrics {
namespace {

void one(std::vector<prometheus::MetricFamily>* out, const char* name, const char* help, prometheus::MetricType type,
         double v) {
  auto f = family(name, help, type);
  add_sample(&f, v);
  out->push_back(std::move(f));
}

// Boot time in Unix seconds (/proc/stat's btime); 0 if unknown.
double boot_time() {
  std::ifstream in("/proc/stat");
  std::string key;
  double v = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> v;
      return v;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

double limit_value(rlim_t v) {
  // Go reports "unlimited" as the largest uint64, as a float.
  return v == RLIM_INFINITY ? 18446744073709551615.0 : static_cast<double>(v);
}

}  // namespace

void collect_process(std::vector<prometheus::MetricFamily>* out) {
  using prometheus::MetricType;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (std::getline(stat, line)) {
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14, stime 15, starttime 22, vsize 23,
    // rss 24 (proc(5)).
    size_t close = line.rfind(')');
    std::istringstream rest(close == std::string::npos ? "" : line.substr(close + 2));
    std::string f[22];
    for (auto& x : f) rest >> x;
    if (!f[21].empty()) {
      double utime = std::stod(f[11]), stime = std::stod(f[12]);
      double start = std::stod(f[19]), vsize = std::stod(f[20]), rss = std::stod(f[21]);
      one(out, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", MetricType::Counter,
          (utime + stime) / ticks);
      one(out, "process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge, rss * page);
      one(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge, vsize);
      if (double bt = boot_time(); bt > 0) {
        one(out, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
            MetricType::Gauge, bt + start / ticks);
      }
    }
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    double n = 0;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    one(out, "process_open_fds", "Number of open file descriptors.", MetricType::Gauge, n - 1);  // less opendir's own
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    one(out, "process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge, limit_value(rl.rlim_cur));
  }
  if (getrlimit(RLIMIT_AS, &rl) == 0) {
    one(out, "process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.",
        MetricType::Gauge, limit_value(rl.rlim_cur));
  }
}

}  // namespace etcdq::metrics
