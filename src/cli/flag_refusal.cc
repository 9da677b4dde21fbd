#include "cli/flag_refusal.h"

#include "common/log_line.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string_view>

namespace etcdq::cli {

std::string json_escape(const std::string& s) {
  spdlog::memory_buf_t out;
  append_zap_escaped(s, &out);
  return std::string(out.data(), out.size());
}

int refuse_flags(const std::string& error) {
  static constexpr std::string_view kGoFlagErrors[] = {"flag provided but not defined: ", "invalid value ",
                                                       "flag needs an argument: ", "bad flag syntax: "};
  for (std::string_view prefix : kGoFlagErrors) {
    if (error.starts_with(prefix)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 2;
    }
  }
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char ts[40];
  std::size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(ts + n, sizeof ts - n, ".%06lldZ", static_cast<long long>(micros));
  std::fprintf(stderr, "{\"level\":\"warn\",\"ts\":\"%s\",\"msg\":\"failed to verify flags\",\"error\":\"%s\"}\n", ts,
               json_escape(error).c_str());
  return 1;
}

}  // namespace etcdq::cli
