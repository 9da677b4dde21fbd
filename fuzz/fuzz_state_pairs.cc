// Fuzzes the reading of a packed state chunk (common/state_pairs.h), as an
// installing member reads whatever a peer's Peer.FetchSnapshot sends in
// SnapshotChunk.packed. The first byte says after how many records the
// callback refuses (0: never); the rest is the chunk.
//
// Invariants: every key and value handed on lies inside the chunk; the
// records handed on, packed again with append(), are exactly the bytes the
// reader went past (nothing skipped, nothing made up); a chunk is accepted
// only when those are all of it; a refusal is the callback's own error
// and stops the reading at once; anything else is the "malformed state
// chunk" error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/state_pairs.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t refuse_after = data[0];
  std::string_view chunk(reinterpret_cast<const char*>(data + 1), size - 1);
  const char* begin = chunk.data();
  const char* end = chunk.data() + chunk.size();
  std::string again;
  size_t records = 0;
  bool refused = false;
  etcdq::Error e = etcdq::state_pairs::for_each(chunk, [&](uint32_t cf, std::string_view key,
                                                           std::string_view value) -> etcdq::Error {
    check(!refused);
    check(cf <= 0xff);
    check(key.data() >= begin && key.data() + key.size() <= end);
    check(value.data() >= begin && value.data() + value.size() <= end);
    etcdq::state_pairs::append(&again, cf, key, value);
    check(chunk.substr(0, again.size()) == again);
    if (refuse_after != 0 && ++records == refuse_after) {
      refused = true;
      return etcdq::errors::internal("refused by the callback");
    }
    return {};
  });
  if (refused) {
    check(e && e.message() == "refused by the callback");
  } else if (e) {
    check(e.message().rfind("malformed state chunk: ", 0) == 0);
    check(again.size() < chunk.size());
  } else {
    check(again == chunk);
  }
  return 0;
}
