#include "common/state_pairs.h"

#include <zlib.h>

namespace etcdq::state_pairs {

namespace {
void put_u32_le(char* p, uint32_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>((v >> 8) & 0xff);
  p[2] = static_cast<char>((v >> 16) & 0xff);
  p[3] = static_cast<char>((v >> 24) & 0xff);
}
}  // namespace

void append(std::string* out, uint32_t cf, std::string_view key, std::string_view value) {
  char header[kRecordOverhead];
  header[0] = static_cast<char>(cf & 0xff);
  put_u32_le(header + 1, static_cast<uint32_t>(key.size()));
  put_u32_le(header + 5, static_cast<uint32_t>(value.size()));
  out->append(header, kRecordOverhead);
  out->append(key);
  out->append(value);
}

uint32_t checksum(uint32_t crc, std::string_view bytes) {
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

namespace detail {
Error malformed(size_t offset, const char* what) {
  return errors::internal("malformed state chunk: " + std::string(what) + " at byte " + std::to_string(offset));
}
}  // namespace detail

}  // namespace etcdq::state_pairs
