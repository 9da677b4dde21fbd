// Fuzzes bbolt/'s reader with whole files: the input is a bbolt database.
// Seeds (fuzz/corpus/fuzz_bbolt/): writer-small.db, made by
// tests/tools/bbolt_tool write (nested and empty buckets); etcd34-snapshot.db,
// `etcdctl snapshot save` of Debian's etcd 3.4.23 after a few puts, deletes
// and a txn, its sha256 trailer cut off (inline buckets, etcd's buckets);
// etcd34-key-bucket-at-root.db, the same with its "key" bucket's root set to
// the root bucket's page (a file `snapshot restore` once took for 0 keys).
//
// Invariants: open() and walk() of any bytes return OK or an error, never
// crash, read out of bounds or loop (the sanitizers and libFuzzer's timeout
// catch those); an error is DataLoss (the file is bad), not anything else;
// a walk is balanced (every bucket_begin has its bucket_end) and for_each
// on a bucket sees no more keys than the whole walk did; a lookup of the
// "key" bucket (what `snapshot restore` reads) is OK, NotFound or DataLoss.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bbolt/reader.h"

namespace {

using etcdq::Code;
using etcdq::Error;

void check(bool ok) {
  if (!ok) std::abort();
}

class Balance : public etcdq::bbolt::Visitor {
 public:
  int open = 0;
  uint64_t keys = 0;
  std::string first_bucket;
  Error bucket_begin(int depth, std::string_view name) override {
    check(depth == open + 1);
    if (depth == 1 && first_bucket.empty()) first_bucket.assign(name);
    ++open;
    return {};
  }
  Error key_value(std::string_view, std::string_view) override {
    check(open > 0);
    ++keys;
    return {};
  }
  Error bucket_end() override {
    check(open > 0);
    --open;
    return {};
  }
};

// The reader works on files: one in-memory file for the whole run.
int memfd() {
  static int fd = memfd_create("fuzz_bbolt", 0);
  check(fd >= 0);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd();
  check(ftruncate(fd, 0) == 0);
  check(pwrite(fd, data, size, 0) == ssize_t(size));
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  etcdq::bbolt::Reader r;
  Error e = r.open(path);
  if (e) {
    check(e.code() == Code::kDataLoss);
    return 0;
  }
  Error lookup = r.for_each({"key"}, [](std::string_view, std::string_view) { return Error(); });
  check(!lookup || lookup.code() == Code::kDataLoss || lookup.code() == Code::kNotFound);
  Balance b;
  e = r.walk(b);
  if (e) {
    check(e.code() == Code::kDataLoss);
    return 0;
  }
  check(b.open == 0);
  if (!b.first_bucket.empty()) {
    uint64_t n = 0;
    e = r.for_each({b.first_bucket}, [&](std::string_view, std::string_view) {
      ++n;
      return Error();
    });
    check(e.ok());
    check(n <= b.keys);
  }
  return 0;
}
