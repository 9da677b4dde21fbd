#include "apply/entry.h"

#include <cstring>

#include <google/protobuf/io/coded_stream.h>

namespace etcdq::apply {

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

bool decode_command(std::string_view bytes, Command* cmd) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) return false;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(kMaxCommandNesting);
  return cmd->ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
}

bool well_framed_command(std::string_view framed) {
  std::string_view rest = framed;
  std::string_view bytes;
  bool corrupt = false;
  if (!next_framed(&rest, &bytes, &corrupt) || !rest.empty()) return false;
  Command cmd;
  return decode_command(bytes, &cmd);
}

}  // namespace etcdq::apply
