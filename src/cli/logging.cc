#include "cli/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace etcdq::cli {
namespace {

// zap's level names (etcd's log lines say "warn" and "fatal"; spdlog's own
// %l says "warning" and "critical"); a member logs critical only as it
// stops for a fault, which is zap's fatal.
class ZapLevel final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string_view name = "info";
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: name = "debug"; break;
      case spdlog::level::warn: name = "warn"; break;
      case spdlog::level::err: name = "error"; break;
      case spdlog::level::critical: name = "fatal"; break;
      default: break;
    }
    dest.append(name.data(), name.data() + name.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<ZapLevel>(); }
};

}  // namespace

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
  // JSON lines, as etcd logs, with zap's level names (%*: ZapLevel).
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<ZapLevel>('*').set_pattern(R"({"level":"%*","ts":"%Y-%m-%dT%H:%M:%S.%f%z","msg":"%v"})");
  logger->set_formatter(std::move(formatter));
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
