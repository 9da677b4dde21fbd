#include "common/entry_frames.h"

#include <cstdint>
#include <cstring>

namespace etcdq {

void append_framed(std::string* entry, std::string_view command) {
  uint32_t n = static_cast<uint32_t>(command.size());
  char len[4];
  std::memcpy(len, &n, 4);
  entry->append(len, 4);
  entry->append(command);
}

void pad_entry(std::string* entry) {
  size_t rem = entry->size() % 8;
  if (rem != 0 || entry->empty()) entry->append(rem ? 8 - rem : 8, '\0');
}

bool next_framed(std::string_view* rest, std::string_view* command, bool* corrupt) {
  *corrupt = false;
  if (rest->size() < 4) return false;  // padding
  uint32_t n;
  std::memcpy(&n, rest->data(), 4);
  if (n == 0) return false;
  if (rest->size() - 4 < n) {
    *corrupt = true;
    return false;
  }
  *command = rest->substr(4, n);
  rest->remove_prefix(4 + n);
  return true;
}

}  // namespace etcdq
