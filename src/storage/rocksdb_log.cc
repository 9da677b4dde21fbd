#include "storage/rocksdb_log.h"

#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>
#include <string>

namespace etcdq::storage {
namespace {

class SpdlogForRocksdb final : public rocksdb::Logger {
 public:
  SpdlogForRocksdb() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    char buf[1024];
    va_list copy;
    va_copy(copy, ap);
    int n = std::vsnprintf(buf, sizeof(buf), format, copy);
    va_end(copy);
    if (n < 0) return;
    std::string_view line(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1));
    if (level == rocksdb::InfoLogLevel::WARN_LEVEL) {
      spdlog::warn("rocksdb: {}", line);
    } else {
      spdlog::error("rocksdb: {}", line);
    }
  }
};

}  // namespace

std::shared_ptr<rocksdb::Logger> rocksdb_logger() {
  static std::shared_ptr<rocksdb::Logger> logger = std::make_shared<SpdlogForRocksdb>();
  return logger;
}

}  // namespace etcdq::storage
