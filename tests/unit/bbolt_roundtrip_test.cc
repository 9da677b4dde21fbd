// bbolt/: what the writer writes, the reader reads back, in order, from
// small files with nested and empty buckets to 100k keys with values up to
// 1 MiB. (That the files also satisfy etcd's own tools is
// tests/integration/test_bbolt_etcd.py.)
#include <sys/resource.h>
#include <sys/stat.h>

#include "bbolt/format.h"
#include "bbolt_test_util.h"

namespace etcdq::bbolt {
namespace {

using testing::Recorder;
using testing::TempDir;

TEST(BboltRoundTrip, SmallFileWithNestedAndEmptyBucketsReadsBackInOrder) {
  TempDir dir;
  std::string path = dir.file("small.db");
  {
    Writer w;
    ASSERT_TRUE(w.open(path).ok());
    ASSERT_TRUE(w.begin_bucket("alpha").ok());
    ASSERT_TRUE(w.put("a", "1").ok());
    ASSERT_TRUE(w.put("b", "").ok());
    ASSERT_TRUE(w.begin_bucket("c-nested").ok());
    ASSERT_TRUE(w.put("x", "y").ok());
    ASSERT_TRUE(w.end_bucket().ok());
    ASSERT_TRUE(w.put("d", "4").ok());
    ASSERT_TRUE(w.end_bucket().ok());
    ASSERT_TRUE(w.begin_bucket("empty").ok());
    ASSERT_TRUE(w.end_bucket().ok());
    ASSERT_TRUE(w.finish().ok());
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(uint64_t(st.st_size), w.pages() * Writer::kPageSize);
  }
  Reader r;
  ASSERT_TRUE(r.open(path).ok());
  EXPECT_EQ(r.meta().page_size, 4096u);
  EXPECT_EQ(r.meta().txid, 1u);  // the newer of the two meta pages
  Recorder rec;
  ASSERT_TRUE(r.walk(rec).ok());
  std::vector<std::string> want = {"B1 alpha", "P a=1", "P b=", "B2 c-nested", "P x=y", "E",
                                   "P d=4",    "E",     "B1 empty", "E"};
  EXPECT_EQ(rec.lines, want);

  std::vector<std::string> nested;
  ASSERT_TRUE(r.for_each({"alpha", "c-nested"}, [&](std::string_view k, std::string_view v) {
    nested.push_back(std::string(k) + "=" + std::string(v));
    return Error();
  }).ok());
  EXPECT_EQ(nested, std::vector<std::string>{"x=y"});
  Error missing = r.for_each({"nope"}, [](std::string_view, std::string_view) { return Error(); });
  EXPECT_EQ(missing.code(), Code::kNotFound);
}

TEST(BboltRoundTrip, KeysLargerThanAPageMakeAFiniteTreeThatReadsBack) {
  // Branch keys of 4 KiB and more: one per page never reached a root, and
  // an etcd snapshot with such a user name grew without end.
  TempDir dir;
  std::string path = dir.file("bigkeys.db");
  std::vector<std::string> want = {"B1 auth"};
  {
    Writer w;
    ASSERT_TRUE(w.open(path).ok());
    ASSERT_TRUE(w.begin_bucket("auth").ok());
    for (int i = 0; i < 300; ++i) {
      std::string key = std::string(8000 + i * 37, 'k') + std::to_string(1000 + i);
      ASSERT_TRUE(w.put(key, "v").ok());
      want.push_back("P " + key + "=v");
    }
    ASSERT_TRUE(w.end_bucket().ok());
    ASSERT_TRUE(w.finish().ok());
    EXPECT_LT(w.pages(), 4000u);  // about 2 pages of data per key; the old writer never finished
  }
  want.push_back("E");
  Reader r;
  ASSERT_TRUE(r.open(path).ok());
  Recorder rec;
  ASSERT_TRUE(r.walk(rec).ok());
  EXPECT_EQ(rec.lines, want);
}

TEST(BboltRoundTrip, EmptyDatabaseHasNoBuckets) {
  TempDir dir;
  std::string path = dir.file("empty.db");
  Writer w;
  ASSERT_TRUE(w.open(path).ok());
  ASSERT_TRUE(w.finish().ok());
  Reader r;
  ASSERT_TRUE(r.open(path).ok());
  Recorder rec;
  ASSERT_TRUE(r.walk(rec).ok());
  EXPECT_TRUE(rec.lines.empty());
  EXPECT_EQ(r.meta().pgid, 4u);  // meta, meta, freelist, empty root leaf: bbolt's own new file
}

// etcd's revision key: 8-byte big-endian main revision, '_', 8-byte sub.
std::string rev_key(uint64_t main) {
  std::string k(17, '\0');
  for (int i = 0; i < 8; ++i) k[i] = char(main >> (56 - 8 * i));
  k[8] = '_';
  return k;
}

// Deterministic value for key i: mostly ~100 bytes, every 9973rd a large
// one up to 1 MiB (overflow pages), every 101st empty.
std::string value_for(uint64_t i) {
  size_t n = i % 9973 == 0 ? (size_t(1) << 20) - (i % 7) : i % 101 == 0 ? 0 : 60 + i % 97;
  std::string v(n, '\0');
  for (size_t j = 0; j < n; ++j) v[j] = char('a' + (i * 31 + j) % 26);
  return v;
}

TEST(BboltRoundTrip, HundredThousandKeysWithMegabyteValuesAndNestedBucketsReadBackInOrder) {
  TempDir dir;
  std::string path = dir.file("large.db");
  constexpr uint64_t kKeys = 100000;
  constexpr int kNested = 50;
  {
    Writer w;
    ASSERT_TRUE(w.open(path).ok());
    ASSERT_TRUE(w.begin_bucket("key").ok());
    for (uint64_t i = 1; i <= kKeys; ++i) ASSERT_TRUE(w.put(rev_key(i), value_for(i)).ok()) << i;
    ASSERT_TRUE(w.end_bucket().ok());
    // Many nested buckets between plain keys, each with a few hundred keys.
    ASSERT_TRUE(w.begin_bucket("outer").ok());
    for (int b = 0; b < kNested; ++b) {
      char name[16];
      std::snprintf(name, sizeof name, "n%04d", b);
      ASSERT_TRUE(w.put(std::string(name) + "-a", "before").ok());
      ASSERT_TRUE(w.begin_bucket(std::string(name) + "-b").ok());
      for (int k = 0; k < 300; ++k) ASSERT_TRUE(w.put(std::to_string(100000 + k), std::string(b + 1, 'v')).ok());
      ASSERT_TRUE(w.end_bucket().ok());
    }
    ASSERT_TRUE(w.end_bucket().ok());
    ASSERT_TRUE(w.finish().ok());
  }
  Reader r;
  ASSERT_TRUE(r.open(path).ok());

  uint64_t next = 1;
  ASSERT_TRUE(r.for_each({"key"}, [&](std::string_view k, std::string_view v) -> Error {
    if (k != rev_key(next)) return Error(Code::kInternal, "key " + std::to_string(next) + " wrong");
    if (v != value_for(next)) return Error(Code::kInternal, "value " + std::to_string(next) + " wrong");
    ++next;
    return {};
  }).ok());
  EXPECT_EQ(next, kKeys + 1);

  // The walk sees every bucket and key, nested ones included.
  class Check : public Visitor {
   public:
    uint64_t keys = 0, buckets = 0, ends = 0;
    int max_depth = 0;
    Error bucket_begin(int depth, std::string_view) override {
      ++buckets;
      max_depth = std::max(max_depth, depth);
      return {};
    }
    Error key_value(std::string_view, std::string_view) override {
      ++keys;
      return {};
    }
    Error bucket_end() override {
      ++ends;
      return {};
    }
  } check;
  ASSERT_TRUE(r.walk(check).ok());
  EXPECT_EQ(check.keys, kKeys + kNested * 301);
  EXPECT_EQ(check.buckets, 2u + kNested);
  EXPECT_EQ(check.ends, check.buckets);
  EXPECT_EQ(check.max_depth, 2);

  std::vector<std::string> inner;
  ASSERT_TRUE(r.for_each({"outer", "n0007-b"}, [&](std::string_view k, std::string_view v) {
    if (inner.empty()) inner.push_back(std::string(k) + "=" + std::string(v));
    return Error();
  }).ok());
  EXPECT_EQ(inner, std::vector<std::string>{"100000=vvvvvvvv"});
}

long peak_rss_kib() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// The writer and the reader stream: 300k keys of 256 bytes (an 88 MB file)
// go through with the peak RSS growing by a few MiB (the 1 MiB output
// buffer, a page per level), not by the data set. (ctest runs each test in
// a process of its own, so the peak is this test's.)
TEST(BboltStreaming, WriterAndReaderMemoryStaysBoundedFor300kKeys) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's quarantine keeps freed memory resident: the peak RSS is the sanitizer's";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "ASan's quarantine keeps freed memory resident: the peak RSS is the sanitizer's";
#endif
#endif
  TempDir dir;
  std::string path = dir.file("stream.db");
  constexpr uint64_t kKeys = 300000;
  constexpr long kSlackKiB = 16 * 1024;
  const long before = peak_rss_kib();
  {
    Writer w;
    ASSERT_TRUE(w.open(path).ok());
    ASSERT_TRUE(w.begin_bucket("key").ok());
    std::string v(256, 'x');
    for (uint64_t i = 1; i <= kKeys; ++i) {
      v[0] = char(i);
      ASSERT_TRUE(w.put(rev_key(i), v).ok());
    }
    ASSERT_TRUE(w.end_bucket().ok());
    ASSERT_TRUE(w.finish().ok());
    ASSERT_GT(w.pages() * Writer::kPageSize, uint64_t(kKeys * 256));
  }
  EXPECT_LT(peak_rss_kib() - before, kSlackKiB);
  Reader r;
  ASSERT_TRUE(r.open(path).ok());
  uint64_t n = 0;
  ASSERT_TRUE(r.for_each({"key"}, [&](std::string_view k, std::string_view) {
    ++n;
    return k == rev_key(n) ? Error() : Error(Code::kInternal, "wrong key");
  }).ok());
  EXPECT_EQ(n, kKeys);
  EXPECT_LT(peak_rss_kib() - before, kSlackKiB);
}

TEST(BboltWriter, KeysOutOfOrderOrRepeatedAreRefused) {
  TempDir dir;
  Writer w;
  ASSERT_TRUE(w.open(dir.file("x.db")).ok());
  ASSERT_TRUE(w.begin_bucket("b").ok());
  ASSERT_TRUE(w.put("k2", "v").ok());
  EXPECT_EQ(w.put("k1", "v").code(), Code::kInvalidArgument);
  // A writer that failed stays failed.
  EXPECT_EQ(w.put("k3", "v").code(), Code::kInvalidArgument);
  EXPECT_FALSE(w.finish().ok());
}

TEST(BboltWriter, BucketNameMustSortAfterThePreviousKey) {
  TempDir dir;
  Writer w;
  ASSERT_TRUE(w.open(dir.file("x.db")).ok());
  ASSERT_TRUE(w.begin_bucket("b").ok());
  ASSERT_TRUE(w.put("m", "v").ok());
  EXPECT_EQ(w.begin_bucket("m").code(), Code::kInvalidArgument);
}

TEST(BboltWriter, MisuseIsRefused) {
  TempDir dir;
  {
    Writer w;
    ASSERT_TRUE(w.open(dir.file("a.db")).ok());
    EXPECT_EQ(w.put("k", "v").code(), Code::kInvalidArgument);  // bbolt's root holds buckets only
  }
  {
    Writer w;
    ASSERT_TRUE(w.open(dir.file("b.db")).ok());
    EXPECT_EQ(w.end_bucket().code(), Code::kInvalidArgument);
  }
  {
    Writer w;
    ASSERT_TRUE(w.open(dir.file("c.db")).ok());
    ASSERT_TRUE(w.begin_bucket("b").ok());
    EXPECT_EQ(w.put("", "v").code(), Code::kInvalidArgument);
  }
  {
    Writer w;
    ASSERT_TRUE(w.open(dir.file("d.db")).ok());
    ASSERT_TRUE(w.begin_bucket("b").ok());
    EXPECT_EQ(w.finish().code(), Code::kInvalidArgument);
  }
}

TEST(BboltWriter, UnfinishedWriterLeavesNoFile) {
  TempDir dir;
  std::string path = dir.file("partial.db");
  {
    Writer w;
    ASSERT_TRUE(w.open(path).ok());
    ASSERT_TRUE(w.begin_bucket("b").ok());
    ASSERT_TRUE(w.put("k", "v").ok());
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace etcdq::bbolt
