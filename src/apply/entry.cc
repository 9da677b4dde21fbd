#include "apply/entry.h"

#include <google/protobuf/io/coded_stream.h>

namespace etcdq::apply {

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
