#include "storage/rocksdb_log.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <string_view>

namespace etcdq::storage {

void RocksdbLog::Logv(const char* format, va_list ap) { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }

void RocksdbLog::Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
  if (!opened_.load(std::memory_order_acquire)) return;
  char buf[1024];
  va_list copy;
  va_copy(copy, ap);
  int n = std::vsnprintf(buf, sizeof(buf), format, copy);
  va_end(copy);
  if (n < 0) return;
  std::string_view line(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1));
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  // A warning either way: what fails a write reaches the member as the
  // write's own error (storage/failure.h).
  spdlog::warn("rocksdb: {}", line);
}

}  // namespace etcdq::storage
