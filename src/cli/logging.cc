#include "cli/logging.h"

#include "common/log_line.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace etcdq::cli {

Error setup_logging(const Config& cfg) {
  std::vector<spdlog::sink_ptr> sinks;
  for (const auto& out : cfg.log_outputs) {
    if (out == "default" || out == "stderr" || out == "journal") {
      sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
    } else if (out == "stdout") {
      sinks.push_back(std::make_shared<spdlog::sinks::stdout_sink_mt>());
    } else {
      // spdlog would create missing directories; etcd (zap) refuses instead.
      std::filesystem::path parent = std::filesystem::absolute(out).parent_path();
      std::error_code ec;
      if (!std::filesystem::is_directory(parent, ec)) {
        return {Code::kInvalidArgument, "open sink \"" + out + "\": open " + out + ": no such file or directory"};
      }
      try {
        sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(out, /*truncate=*/false));
      } catch (const spdlog::spdlog_ex& e) {
        return {Code::kInvalidArgument, "open sink \"" + out + "\": " + e.what()};
      }
    }
  }
  auto logger = std::make_shared<spdlog::logger>("etcdq", sinks.begin(), sinks.end());
  // JSON lines, as etcd (zap) logs: common/log_line.h.
  logger->set_formatter(etcdq::make_zap_formatter());
  spdlog::set_default_logger(logger);
  const std::string& level = cfg.log_level;
  if (level == "debug") spdlog::set_level(spdlog::level::debug);
  else if (level == "warn") spdlog::set_level(spdlog::level::warn);
  else if (level == "error") spdlog::set_level(spdlog::level::err);
  else if (level == "panic" || level == "fatal") spdlog::set_level(spdlog::level::critical);
  else spdlog::set_level(spdlog::level::info);
  spdlog::flush_on(spdlog::level::info);
  return {};
}

}  // namespace etcdq::cli
