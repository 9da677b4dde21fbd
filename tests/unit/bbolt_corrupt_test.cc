// bbolt/: a truncated, bit-flipped or hostile file is refused with a clear
// error, never a crash, an out-of-bounds read or an endless walk (run these
// under the ASan build to prove the "never" part).
#include "bbolt/format.h"
#include "bbolt/snapshot_file.h"
#include "bbolt_test_util.h"

namespace etcdq::bbolt {
namespace {

using testing::open_and_walk;
using testing::read_all;
using testing::TempDir;
using testing::write_all;

// A file of a few hundred pages: a 3-level tree, an overflow value, a
// nested bucket.
std::string make_file(const std::string& path, bool trailer = false) {
  Writer w;
  EXPECT_TRUE(w.open(path).ok());
  EXPECT_TRUE(w.begin_bucket("key").ok());
  for (int i = 0; i < 8000; ++i) {
    char k[16];
    std::snprintf(k, sizeof k, "k%08d", i);
    EXPECT_TRUE(w.put(k, i == 777 ? std::string(20000, 'L') : std::string(40, char('a' + i % 26))).ok());
  }
  EXPECT_TRUE(w.end_bucket().ok());
  EXPECT_TRUE(w.begin_bucket("meta").ok());
  EXPECT_TRUE(w.begin_bucket("nested").ok());
  EXPECT_TRUE(w.put("x", "y").ok());
  EXPECT_TRUE(w.end_bucket().ok());
  EXPECT_TRUE(w.end_bucket().ok());
  EXPECT_TRUE(w.finish().ok());
  if (trailer) {
    EXPECT_TRUE(append_sha256_trailer(path).ok());
  }
  return read_all(path);
}

// The page id of the "key" bucket's root (a branch page in make_file's
// file): the first element of the root bucket's page names it.
uint64_t key_bucket_root(const std::string& file, const Reader& r) {
  const char* rp = file.data() + r.meta().root * 4096;
  const char* el = rp + kPageHeaderSize;
  return get64(rp + kPageHeaderSize + get32(el + 4) + get32(el + 8));
}

TEST(BboltCorrupt, EveryTruncationIsRefusedAsDataLoss) {
  TempDir dir;
  std::string good = make_file(dir.file("good.db"));
  ASSERT_TRUE(open_and_walk(dir.file("good.db")).ok());
  std::string cut = dir.file("cut.db");
  // Every page boundary and a few bytes around some of them.
  for (size_t len = 0; len < good.size(); len += (len % 4096 == 0 ? 1 : 4095)) {
    write_all(cut, good.substr(0, len));
    Error e = open_and_walk(cut);
    ASSERT_EQ(e.code(), Code::kDataLoss) << "length " << len << ": " << e.message();
    ASSERT_NE(e.message().find("bbolt: "), std::string::npos);
  }
}

TEST(BboltCorrupt, TruncatedFileSaysTruncated) {
  TempDir dir;
  std::string good = make_file(dir.file("good.db"));
  write_all(dir.file("cut.db"), good.substr(0, good.size() / 2));
  Error e = open_and_walk(dir.file("cut.db"));
  EXPECT_EQ(e.code(), Code::kDataLoss);
  EXPECT_NE(e.message().find("truncated"), std::string::npos) << e.message();
}

TEST(BboltCorrupt, BitFlipsNeverCrashAndStructuralOnesAreRefused) {
  TempDir dir;
  std::string good = make_file(dir.file("good.db"));
  std::string bad = dir.file("bad.db");
  std::mt19937_64 rng(15);
  int refused = 0;
  const int kFlips = 800;
  for (int i = 0; i < kFlips; ++i) {
    std::string data = good;
    // Half of the flips in page headers and elements, where they matter.
    size_t page = rng() % (data.size() / 4096);
    size_t off = i % 2 ? page * 4096 + rng() % 64 : rng() % data.size();
    data[off] = char(data[off] ^ (1 << (rng() % 8)));
    write_all(bad, data);
    Error e = open_and_walk(bad);
    if (e) {
      ASSERT_EQ(e.code(), Code::kDataLoss) << e.message();
      ++refused;
    }
  }
  // Flips inside values cannot be seen by the format (the sha256 trailer
  // catches those); most flips in headers can.
  EXPECT_GT(refused, kFlips / 4);
}

TEST(BboltCorrupt, EitherMetaPageAloneMayBeBadBothIsRefused) {
  TempDir dir;
  std::string good = make_file(dir.file("good.db"));
  std::string bad = dir.file("bad.db");
  std::string m0 = good, m1 = good, both = good;
  m0[20] ^= 1;            // meta 0's version
  m1[4096 + 40] ^= 1;     // meta 1's root
  both[20] ^= 1;
  both[4096 + 40] ^= 1;
  write_all(bad, m0);
  {
    Reader r;
    ASSERT_TRUE(r.open(bad).ok());
    EXPECT_EQ(r.meta().txid, 1u);
  }
  EXPECT_TRUE(open_and_walk(bad).ok());
  write_all(bad, m1);
  {
    Reader r;
    ASSERT_TRUE(r.open(bad).ok());
    EXPECT_EQ(r.meta().txid, 0u);  // falls back to the older one, as bbolt does
  }
  EXPECT_TRUE(open_and_walk(bad).ok());
  write_all(bad, both);
  Error e = open_and_walk(bad);
  EXPECT_EQ(e.code(), Code::kDataLoss);
  EXPECT_NE(e.message().find("no valid meta page"), std::string::npos) << e.message();
}

TEST(BboltCorrupt, BucketPointingBackAtItsParentIsRefusedNotLooped) {
  TempDir dir;
  std::string good = make_file(dir.file("good.db"));
  Reader r;
  ASSERT_TRUE(r.open(dir.file("good.db")).ok());
  const uint64_t root = r.meta().root;
  // The root page is a leaf of two bucket elements ("key", "meta"); point
  // "key"'s root at the root page itself.
  std::string data = good;
  char* page = data.data() + root * 4096;
  ASSERT_EQ(get16(page + 8), kLeafPage);
  const char* el = page + kPageHeaderSize;
  size_t value_at = kPageHeaderSize + get32(el + 4) + get32(el + 8);
  put64(page + value_at, root);
  write_all(dir.file("loop.db"), data);
  Error e = open_and_walk(dir.file("loop.db"));
  EXPECT_EQ(e.code(), Code::kDataLoss) << e.message();
}

TEST(BboltCorrupt, LookupOfABucketPointingAtTheRootPageIsRefused) {
  // What `snapshot restore` does (for_each {"key"}) reads the root page,
  // then the key bucket's: with the key bucket's root at the root page, the
  // lookup once read the bucket list as the key bucket and found 0 keys.
  TempDir dir;
  std::string data = make_file(dir.file("good.db"));
  Reader r;
  ASSERT_TRUE(r.open(dir.file("good.db")).ok());
  const uint64_t root = r.meta().root;
  char* page = data.data() + root * 4096;
  const char* el = page + kPageHeaderSize;
  ASSERT_EQ(std::string(page + kPageHeaderSize + get32(el + 4), get32(el + 8)), "key");
  put64(page + kPageHeaderSize + get32(el + 4) + get32(el + 8), root);
  write_all(dir.file("key-at-root.db"), data);
  Reader bad;
  ASSERT_TRUE(bad.open(dir.file("key-at-root.db")).ok());
  uint64_t keys = 0;
  Error e = bad.for_each({"key"}, [&](std::string_view, std::string_view) {
    ++keys;
    return Error();
  });
  EXPECT_EQ(e.code(), Code::kDataLoss) << e.message();
  EXPECT_NE(e.message().find("referenced more than once"), std::string::npos) << e.message();
  EXPECT_EQ(keys, 0u);
}

TEST(BboltCorrupt, BranchPointingAtAMetaPageOrPastTheEndIsRefused) {
  TempDir dir;
  std::string good = make_file(dir.file("good.db"));
  Reader r;
  ASSERT_TRUE(r.open(dir.file("good.db")).ok());
  const uint64_t key_root = key_bucket_root(good, r);
  ASSERT_EQ(get16(good.data() + key_root * 4096 + 8), kBranchPage);
  for (uint64_t target : {uint64_t{0}, uint64_t{1}, r.meta().pgid, ~uint64_t{0}}) {
    std::string data = good;
    put64(data.data() + key_root * 4096 + kPageHeaderSize + 8, target);
    write_all(dir.file("bad.db"), data);
    Error e = open_and_walk(dir.file("bad.db"));
    EXPECT_EQ(e.code(), Code::kDataLoss) << target << ": " << e.message();
  }
}

TEST(BboltCorrupt, BranchPointingAtItselfIsRefusedAtOnce) {
  // Each level of a walk holds its page: a branch page that is its own
  // child was once walked 64 levels deep, a copy a level (an 8 MiB page
  // made 552 MB) before the depth limit refused it.
  TempDir dir;
  std::string data = make_file(dir.file("good.db"));
  Reader r;
  ASSERT_TRUE(r.open(dir.file("good.db")).ok());
  const uint64_t key_root = key_bucket_root(data, r);
  ASSERT_EQ(get16(data.data() + key_root * 4096 + 8), kBranchPage);
  put64(data.data() + key_root * 4096 + kPageHeaderSize + 8, key_root);
  write_all(dir.file("bad.db"), data);
  Error e = open_and_walk(dir.file("bad.db"));
  EXPECT_EQ(e.code(), Code::kDataLoss);
  EXPECT_NE(e.message().find("its own descendant"), std::string::npos) << e.message();
}

TEST(BboltCorrupt, BranchKeyThatWouldMisdirectLookupsIsRefused) {
  TempDir dir;
  std::string good = make_file(dir.file("good.db"));
  Reader r;
  ASSERT_TRUE(r.open(dir.file("good.db")).ok());
  const uint64_t key_root = key_bucket_root(good, r);
  char* branch = nullptr;
  std::string data = good;
  branch = data.data() + key_root * 4096;
  ASSERT_EQ(get16(branch + 8), kBranchPage);
  ASSERT_GE(get16(branch + 10), 2);
  // Element 1's key made larger than every key of its child: a full scan
  // would not notice, a lookup in bbolt would go down the wrong page.
  char* el1 = branch + kPageHeaderSize + kElementSize;
  branch[kPageHeaderSize + kElementSize + get32(el1)] = char(0xff);
  write_all(dir.file("bad.db"), data);
  Error e = open_and_walk(dir.file("bad.db"));
  EXPECT_EQ(e.code(), Code::kDataLoss);
  EXPECT_NE(e.message().find("outside the range"), std::string::npos) << e.message();
}

TEST(BboltSnapshotFile, TrailerCatchesEveryFlipAndTruncation) {
  TempDir dir;
  std::string snap = dir.file("snap.db");
  std::string good = make_file(snap, /*trailer=*/true);
  uint64_t db_bytes = 0;
  ASSERT_TRUE(check_sha256_trailer(snap, &db_bytes).ok());
  EXPECT_EQ(db_bytes, good.size() - 32);
  ASSERT_TRUE(open_and_walk(snap, db_bytes).ok());

  std::mt19937_64 rng(7);
  std::string bad = dir.file("bad.db");
  for (int i = 0; i < 40; ++i) {
    std::string data = good;
    size_t off = rng() % data.size();
    data[off] = char(data[off] ^ (1 << (rng() % 8)));
    write_all(bad, data);
    Error e = check_sha256_trailer(bad, &db_bytes);
    EXPECT_EQ(e.code(), Code::kDataLoss) << off;
    EXPECT_NE(e.message().find("sha256 mismatch"), std::string::npos) << e.message();
  }
  write_all(bad, good.substr(0, good.size() - 4096));
  Error e = check_sha256_trailer(bad, &db_bytes);
  EXPECT_EQ(e.code(), Code::kDataLoss);
  write_all(bad, good.substr(0, good.size() - 32));  // the bare database: no trailer
  e = check_sha256_trailer(bad, &db_bytes);
  EXPECT_NE(e.message().find("snapshot missing hash"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace etcdq::bbolt
