// Fuzzes apply (apply/applier.h) on a real MVCC store: the input is one
// Raft log entry, framing and all, applied twice (at two indexes) to an empty
// RocksDB in a temporary directory, as a member applies committed entries.
// (One database serves the whole run; it is emptied before each input.)
// The log's entries were validated by the leader, but apply must not crash
// on any of them: a crash here would stop every member at once.
//
// Invariants checked after each entry (cheap ones): one result per command;
// the applied index is the entry's; the revision never goes back and moves
// at most one per command; the compaction revision stays at or below it;
// every live key, in key order, has 0 < create_revision <= mod_revision <=
// revision and version >= 1, and a count that matches.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include "apply/applier.h"
#include "apply/entry.h"
#include "apply/state_machine.h"
#include "member/member.h"
#include "mvcc/range.h"
#include "mvcc/store.h"
#include "storage/batch.h"
#include "storage/engine.h"
#include "storage/iterator.h"

namespace {

namespace fs = std::filesystem;
using namespace etcdq;

void check(bool ok) {
  if (!ok) std::abort();
}

// One database for the whole run, emptied before each input: opening a
// RocksDB per input cost 50 ms, a hundred times the apply itself. Removed at
// exit (libFuzzer exits normally at the end of a run).
struct Db {
  fs::path dir;
  std::unique_ptr<storage::Engine> engine;
  Db() {
    fs::path root = "/dev/shm";
    if (const char* t = std::getenv("ETCDQ_FUZZ_TMP")) root = t;
    std::error_code ec;
    if (!fs::is_directory(root, ec) || access(root.c_str(), W_OK) != 0) root = fs::temp_directory_path();
    dir = root / ("etcdq-fuzz-apply-" + std::to_string(getpid()));
    fs::remove_all(dir, ec);
    check(!storage::Engine::open(dir.string(), &engine));
  }
  ~Db() {
    engine.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

storage::Engine* engine() {
  static Db db;
  return db.engine.get();
}

void empty(storage::Engine* engine) {
  storage::Batch batch(engine);
  for (int c = 0; c < storage::kCfCount; ++c) {
    auto cf = static_cast<storage::Cf>(c);
    storage::Iterator it = engine->iterator(cf);
    for (it.seek_to_first(); it.valid(); it.next()) batch.remove(cf, it.key());
  }
  check(!engine->write(batch));
}

void check_state(const apply::Applier& applier, const mvcc::Store& store, uint64_t index, int64_t rev_before,
                 size_t commands) {
  check(applier.applied_index() == index);
  auto view = store.view();
  int64_t rev = view->revision();
  check(rev >= rev_before && rev - rev_before <= static_cast<int64_t>(commands));
  check(view->compact_revision() <= rev);
  mvcc::RangeResult all;
  check(!mvcc::range(*view, "", std::string_view("\0", 1), {}, rev, view->compact_revision(), &all));
  check(all.count == static_cast<int64_t>(all.kvs.size()));
  for (size_t i = 0; i < all.kvs.size(); ++i) {
    const auto& kv = all.kvs[i];
    check(kv.create_revision() > 0 && kv.create_revision() <= kv.mod_revision() && kv.mod_revision() <= rev);
    check(kv.version() >= 1);
    if (i > 0) check(all.kvs[i - 1].key() < kv.key());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // "skipping an undecodable command" per input
  google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" per input
  etcdq::member::add_key_spaces();            // the queues' apply layer, as in etcdq
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view entry(reinterpret_cast<const char*>(data), size);
  storage::Engine* db = engine();
  empty(db);
  {
    apply::StateMachine s(db, apply::StateMachineOptions{});
    // How many commands the entry frames, and whether it is truncated.
    size_t commands = 0;
    bool corrupt = false;  // the rest of the entry is skipped
    {
      std::string_view rest = entry;
      std::string_view bytes;
      while (apply::next_framed(&rest, &bytes, &corrupt)) ++commands;
    }
    for (uint64_t index = 1; index <= 2; ++index) {
      int64_t rev_before = s.store()->view()->revision();
      std::vector<apply::Result> results;
      Error e = s.applier()->apply(index, entry, &results);
      check(results.size() == commands);
      // Nothing in an entry stops the member: a truncated frame ends the
      // entry (every member skips the rest alike), the commands before it
      // apply (apply/applier.h).
      check(!e);
      check_state(*s.applier(), *s.store(), index, rev_before, commands);
    }
  }
  return 0;
}
