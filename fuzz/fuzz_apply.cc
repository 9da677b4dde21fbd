// Fuzzes apply (apply/applier.h) on a real MVCC store: the input is one
// Raft log entry, framing and all, applied twice (at two indexes) to a fresh
// RocksDB in a temporary directory, as a member applies committed entries.
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

#include <spdlog/spdlog.h>

#include "apply/alarms.h"
#include "apply/applier.h"
#include "apply/entry.h"
#include "apply/members.h"
#include "lease/lessor.h"
#include "mvcc/range.h"
#include "mvcc/store.h"
#include "queue/book.h"
#include "storage/engine.h"

namespace {

namespace fs = std::filesystem;
using namespace etcdq;

void check(bool ok) {
  if (!ok) std::abort();
}

// tmpfs when there is one: a RocksDB per input is most of the cost.
fs::path scratch_root() {
  if (const char* t = std::getenv("ETCDQ_FUZZ_TMP")) return t;
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return fs::temp_directory_path();
}

struct State {
  std::unique_ptr<storage::Engine> engine;
  std::unique_ptr<mvcc::Store> store;
  std::unique_ptr<lease::Lessor> lessor;
  std::unique_ptr<apply::Alarms> alarms;
  std::unique_ptr<apply::Members> members;
  std::unique_ptr<queue::Book> queues;
  std::unique_ptr<apply::Applier> applier;

  ~State() {
    applier.reset();
    queues.reset();
    members.reset();
    alarms.reset();
    lessor.reset();
    store.reset();
    engine.reset();
  }
};

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
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path dir = scratch_root() / ("etcdq-fuzz-apply-" + std::to_string(getpid()));
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::string_view entry(reinterpret_cast<const char*>(data), size);
  {
    State s;
    check(!storage::Engine::open(dir.string(), &s.engine));
    s.store = std::make_unique<mvcc::Store>(s.engine.get());
    s.lessor = std::make_unique<lease::Lessor>(s.engine.get(), 2);
    s.alarms = std::make_unique<apply::Alarms>(s.engine.get());
    s.members = std::make_unique<apply::Members>(s.engine.get());
    s.queues = std::make_unique<queue::Book>(s.engine.get());
    s.applier = std::make_unique<apply::Applier>(s.store.get(), s.lessor.get(), s.alarms.get(), s.members.get(),
                                                 s.queues.get());
    // How many commands the entry frames, and whether it is truncated.
    size_t commands = 0;
    bool corrupt = false;
    {
      std::string_view rest = entry;
      std::string_view bytes;
      while (apply::next_framed(&rest, &bytes, &corrupt)) ++commands;
    }
    for (uint64_t index = 1; index <= 2; ++index) {
      int64_t rev_before = s.store->view()->revision();
      std::vector<apply::Result> results;
      Error e = s.applier->apply(index, entry, &results);
      check(results.size() == commands);
      // A truncated entry stops the member (nothing committed); nothing else may fail.
      check(static_cast<bool>(e) == corrupt);
      if (e) break;
      check_state(*s.applier, *s.store, index, rev_before, commands);
    }
  }
  fs::remove_all(dir, ec);
  return 0;
}
