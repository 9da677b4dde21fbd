// Checkpoints of the state database, one per Raft snapshot: the state at
// exactly the snapshot's applied index, which a member far behind (or new)
// streams from the member that took it (consensus/node.h, Peer.FetchSnapshot).
//
// A checkpoint is RocksDB's: SST files hard-linked from the live database,
// after a flush of the memtables. Taking one costs a memtable flush and a
// few file links; it pins the SST files it links until it is deleted, so
// disk use may grow by what compaction rewrote since the newest snapshot.
// The two newest are kept (a fetch may still be reading the older one).
//
// Thread-safety: take() from one thread (the consensus thread); read()
// from any thread, concurrently with take().
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "common/error.h"
#include "storage/engine.h"

namespace etcdq::storage {

class Checkpoints {
 public:
  // `root`: directory holding one sub-directory per checkpoint.
  explicit Checkpoints(std::string root);

  // Checkpoints `engine` as the state at `index` (what the engine holds now).
  // Errors: RocksDB's, naming the directory.
  Error take(Engine* engine, uint64_t index);

  // Calls `fn` for every (column family, key, value) of the newest kept
  // checkpoint at `min_index` or later, in column family then key order;
  // stops at the first error `fn` returns and returns it. Errors: an
  // internal error when no such checkpoint is kept; RocksDB's.
  using Visitor = std::function<Error(Cf, std::string_view key, std::string_view value)>;
  Error read(uint64_t min_index, const Visitor& fn) const;

  // The newest kept checkpoint's index (0: none).
  uint64_t newest() const;

  static constexpr int kKept = 2;

 private:
  std::string dir_of(uint64_t index) const;
  std::string root_;
  mutable std::mutex mu_;  // guards the directory set against a concurrent take()
};

}  // namespace etcdq::storage
