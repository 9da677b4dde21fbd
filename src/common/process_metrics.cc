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

// Received and sent bytes summed over every interface of /proc/self/net/dev
// (the process's network namespace, loopback included), as Go's procfs
// NetDev().Total() that client_golang's process collector reports. False if
// the file cannot be read.
bool net_dev_totals(double* rx, double* tx) {
  std::ifstream in("/proc/self/net/dev");
  if (!in) return false;
  std::string line;
  *rx = *tx = 0;
  int n = 0;
  while (std::getline(in, line)) {
    // "  eth0: rx_bytes rx_packets rx_errs rx_drop rx_fifo rx_frame rx_compressed rx_multicast tx_bytes ...";
    // the two header lines have no colon.
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream f(line.substr(colon + 1));
    double v[9] = {};
    for (double& x : v) f >> x;
    if (!f) continue;
    *rx += v[0];
    *tx += v[8];
    ++n;
  }
  return n > 0;
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
    // etcd's own pair (pkg/runtime FDUsage, FDLimit; etcdmain's monitor).
    one(out, "os_fd_used", "The number of used file descriptors.", MetricType::Gauge, n - 1);
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    one(out, "process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge, limit_value(rl.rlim_cur));
    one(out, "os_fd_limit", "The file descriptor limit.", MetricType::Gauge, limit_value(rl.rlim_cur));
  }
  if (double rx, tx; net_dev_totals(&rx, &tx)) {
    one(out, "process_network_receive_bytes_total", "Number of bytes received by the process over the network.",
        MetricType::Counter, rx);
    one(out, "process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.",
        MetricType::Counter, tx);
  }
  if (getrlimit(RLIMIT_AS, &rl) == 0) {
    one(out, "process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.",
        MetricType::Gauge, limit_value(rl.rlim_cur));
  }
}

}  // namespace etcdq::metrics
