#include "bbolt/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace etcdq::bbolt {

namespace {

constexpr int kMaxTreeDepth = 64;
constexpr int kMaxBucketNesting = 64;
constexpr uint32_t kFallbackPageSize = 4096;  // bbolt's guess when meta 0 is bad

using ElementFn = std::function<Error(uint32_t flags, std::string_view key, std::string_view value)>;

bool page_size_ok(uint32_t ps) { return ps >= 512 && ps <= 65536 && (ps & (ps - 1)) == 0; }

}  // namespace

struct Reader::Bucket {
  uint64_t root = 0;             // 0: inline, see page
  std::string_view inline_page;  // the leaf page stored in the bucket's value
};

// One walk: the element budget and the recursion over pages and buckets.
class Reader::Scan {
 public:
  explicit Scan(const Reader& r) : r_(r) {
    // A valid file holds at most one 16-byte element per 16 bytes, each
    // visited once: more visits mean a page referenced twice.
    budget_ = r.meta_.pgid * r.meta_.page_size / kElementSize + 1;
    seen_.assign(r.meta_.pgid / 64 + 1, 0);
  }

  Error decode_bucket(std::string_view value, Bucket* b) const {
    if (value.size() < kBucketHeaderSize) return r_.corrupt("bucket value shorter than its header");
    b->root = get64(value.data());
    if (b->root == 0) {
      b->inline_page = value.substr(kBucketHeaderSize);
      if (b->inline_page.size() < kPageHeaderSize) return r_.corrupt("inline bucket shorter than a page header");
    }
    return {};
  }

  // Calls fn for each element of bucket b in key order.
  Error bucket(const Bucket& b, const ElementFn& fn) {
    std::string last;
    bool has_last = false;
    auto ordered = [&](uint32_t flags, std::string_view k, std::string_view v) -> Error {
      if (has_last && std::string_view(last).compare(k) >= 0) return r_.corrupt("keys out of order in a bucket");
      last.assign(k);
      has_last = true;
      return fn(flags, k, v);
    };
    if (b.root == 0) {
      const std::string_view p = b.inline_page;
      if (get16(p.data() + 8) != kLeafPage) return r_.corrupt("inline bucket page is not a leaf");
      return page(p, 0, /*root=*/true, ordered, Range());
    }
    return tree(b.root, 0, /*root=*/true, ordered, Range());
  }

  // The key range a subtree must keep to: lookups in bbolt (cursor.search)
  // go down the last branch whose key is <= the key, so every key under
  // branch element i is >= its key (i > 0) and < the key of element i + 1.
  // A file that breaks this iterates fine but answers lookups wrongly.
  struct Range {
    const std::string_view* lo = nullptr;
    const std::string_view* hi = nullptr;
    bool holds(std::string_view k) const { return (!lo || k.compare(*lo) >= 0) && (!hi || k.compare(*hi) < 0); }
  };

  // Walks the subtree at pgid.
  Error tree(uint64_t pgid, int depth, bool root, const ElementFn& fn, Range range) {
    if (depth >= kMaxTreeDepth) return r_.corrupt("tree deeper than 64 levels");
    // A page that is its own ancestor would be read (and held, one copy a
    // level) until the depth limit: refuse it at once.
    if (std::find(path_.begin(), path_.end(), pgid) != path_.end()) return r_.corrupt("a page is its own descendant");
    std::string buf;
    if (Error e = r_.read_page(pgid, &buf)) return e;
    // Each page (and each of its overflow pages) belongs to one tree node:
    // a bucket whose root is a page some walk already read (the root
    // bucket's page, another bucket's page) would be read as this
    // bucket's, e.g. the file's bucket list as the key bucket's contents.
    const uint64_t pages = buf.size() / r_.meta_.page_size;
    for (uint64_t p = pgid; p < pgid + pages; ++p) {
      uint64_t& word = seen_[p / 64];
      const uint64_t bit = uint64_t{1} << (p % 64);
      if (word & bit) return r_.corrupt("page " + std::to_string(p) + " referenced more than once");
      word |= bit;
    }
    path_.push_back(pgid);
    Error e = page(buf, depth, root, fn, range);
    path_.pop_back();
    return e;
  }

  Error page(std::string_view p, int depth, bool root, const ElementFn& fn, Range range) {
    const uint16_t flags = get16(p.data() + 8);
    const uint64_t count = get16(p.data() + 10);
    if (flags != kLeafPage && flags != kBranchPage) return r_.corrupt("bucket page is neither leaf nor branch");
    if (kPageHeaderSize + count * kElementSize > p.size()) return r_.corrupt("page elements past the page end");
    if (count == 0 && !(root && flags == kLeafPage)) return r_.corrupt("empty page inside a tree");
    if (count > budget_) return r_.corrupt("page referenced more than once");
    budget_ -= count;
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t at = kPageHeaderSize + i * kElementSize;
      const char* el = p.data() + at;
      if (flags == kLeafPage) {
        const uint32_t eflags = get32(el);
        const uint64_t start = at + get32(el + 4);
        const uint64_t ksize = get32(el + 8), vsize = get32(el + 12);
        if (start + ksize + vsize > p.size()) return r_.corrupt("leaf element past the page end");
        const std::string_view key = p.substr(start, ksize);
        if (!range.holds(key)) return r_.corrupt("key outside the range its branch page gives it");
        if (Error e = fn(eflags, key, p.substr(start + ksize, vsize))) return e;
      } else {
        std::string_view key, next;
        if (Error e = branch_key(p, i, &key)) return e;
        if (i + 1 < count) {
          if (Error e = branch_key(p, i + 1, &next)) return e;
        }
        Range child;
        child.lo = i == 0 ? range.lo : &key;
        child.hi = i + 1 < count ? &next : range.hi;
        if (Error e = tree(get64(el + 8), depth + 1, false, fn, child)) return e;
      }
    }
    return {};
  }

  Error branch_key(std::string_view p, uint64_t i, std::string_view* key) const {
    const uint64_t at = kPageHeaderSize + i * kElementSize;
    const uint64_t start = at + get32(p.data() + at);
    const uint64_t ksize = get32(p.data() + at + 4);
    if (start + ksize > p.size()) return r_.corrupt("branch element past the page end");
    *key = p.substr(start, ksize);
    return {};
  }

 private:
  const Reader& r_;
  uint64_t budget_;
  std::vector<uint64_t> path_;  // the pages from the root to the one being read
  // A bit a page below the high-water mark: read by this scan already.
  // meta.pgid / 8 bytes (open() bounds pgid by the file's length).
  std::vector<uint64_t> seen_;
};

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
}

Reader::Reader(Reader&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      db_bytes_(o.db_bytes_),
      meta_(o.meta_),
      bytes_read_(o.bytes_read_) {}

Reader& Reader::operator=(Reader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    db_bytes_ = o.db_bytes_;
    meta_ = o.meta_;
    bytes_read_ = o.bytes_read_;
  }
  return *this;
}

Error Reader::corrupt(const std::string& what) const {
  return Error(Code::kDataLoss, "bbolt: " + path_ + ": " + what);
}

static Error pread_all(int fd, char* buf, size_t n, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, buf + done, n - done, off_t(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errors::internal("bbolt: read " + path + ": " + std::strerror(errno));
    if (r == 0) return Error(Code::kDataLoss, "bbolt: " + path + ": truncated (short read)");
    done += size_t(r);
  }
  return {};
}

Error Reader::read_page(uint64_t pgid, std::string* buf) const {
  if (pgid < 2) return corrupt("page " + std::to_string(pgid) + " is a meta page, referenced from a tree");
  if (pgid >= meta_.pgid) return corrupt("page " + std::to_string(pgid) + " beyond the high-water mark");
  const uint64_t ps = meta_.page_size;
  char head[kPageHeaderSize];
  if (Error e = pread_all(fd_, head, sizeof head, pgid * ps, path_)) return e;
  if (get64(head) != pgid) return corrupt("page " + std::to_string(pgid) + " records id " + std::to_string(get64(head)));
  const uint64_t pages = uint64_t(get32(head + 12)) + 1;
  if (pgid + pages > meta_.pgid) return corrupt("page " + std::to_string(pgid) + " overflows past the high-water mark");
  buf->resize(pages * ps);
  bytes_read_ += buf->size();
  return pread_all(fd_, buf->data(), buf->size(), pgid * ps, path_);
}

Error Reader::open(const std::string& path, uint64_t db_bytes) {
  if (fd_ >= 0) ::close(fd_);
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return errors::internal("bbolt: cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) return errors::internal("bbolt: stat " + path + ": " + std::strerror(errno));
  const uint64_t size = uint64_t(st.st_size);
  if (db_bytes == 0) db_bytes = size;
  if (db_bytes > size) return corrupt("truncated: " + std::to_string(size) + " bytes, expected " + std::to_string(db_bytes));
  db_bytes_ = db_bytes;

  // Returns an empty string if the meta page at `off` is valid and
  // consistent with the file, else why not.
  auto load = [&](uint64_t off, uint64_t id, Meta* m) -> std::string {
    if (off + kPageHeaderSize + kMetaSize > db_bytes) return "missing (file too short)";
    char raw[kPageHeaderSize + kMetaSize];
    if (Error e = pread_all(fd_, raw, sizeof raw, off, path_)) return e.message();
    *m = decode_meta(raw + kPageHeaderSize);
    if (m->magic != kMagic) return "invalid magic";
    if (m->version != kVersion) return "version " + std::to_string(m->version) + ", expected 2";
    if (m->checksum != fnv64a(std::string_view(raw + kPageHeaderSize, kMetaChecksumOffset))) return "checksum mismatch";
    if (get64(raw) != id || get16(raw + 8) != kMetaPage) return "not marked as meta page " + std::to_string(id);
    if (!page_size_ok(m->page_size)) return "bad page size " + std::to_string(m->page_size);
    if (m->pgid < 3 || m->pgid > db_bytes / m->page_size)
      return "truncated: high-water mark " + std::to_string(m->pgid) + " pages of " + std::to_string(m->page_size) +
             " bytes, file holds " + std::to_string(db_bytes);
    if (m->root < 2 || m->root >= m->pgid) return "root page out of range";
    if (m->freelist != kNoFreelist && (m->freelist < 2 || m->freelist >= m->pgid)) return "freelist page out of range";
    return {};
  };
  Meta m0, m1;
  std::string why0 = load(0, 0, &m0);
  const uint64_t ps = why0.empty() ? m0.page_size : kFallbackPageSize;
  std::string why1 = load(ps, 1, &m1);
  if (!why0.empty() && !why1.empty()) return corrupt("no valid meta page (meta 0: " + why0 + "; meta 1: " + why1 + ")");
  if (why0.empty() && why1.empty()) {
    if (m0.page_size != m1.page_size) return corrupt("meta pages disagree on the page size");
    meta_ = m1.txid > m0.txid ? m1 : m0;
  } else {
    meta_ = why0.empty() ? m0 : m1;
  }
  return {};
}

Error Reader::walk(Visitor& v) const {
  if (fd_ < 0) return Error(Code::kFailedPrecondition, "bbolt: reader not open");
  Scan scan(*this);
  std::function<Error(const Bucket&, int)> visit = [&](const Bucket& b, int depth) -> Error {
    if (depth > kMaxBucketNesting) return corrupt("buckets nested deeper than 64");
    return scan.bucket(b, [&](uint32_t flags, std::string_view k, std::string_view val) -> Error {
      if (!(flags & kBucketLeafFlag)) {
        if (depth == 0) return corrupt("key outside any bucket");
        return v.key_value(k, val);
      }
      Bucket child;
      if (Error e = scan.decode_bucket(val, &child)) return e;
      if (Error e = v.bucket_begin(depth + 1, k)) return e;
      if (Error e = visit(child, depth + 1)) return e;
      return v.bucket_end();
    });
  };
  Bucket root;
  root.root = meta_.root;
  return visit(root, 0);
}

Error Reader::for_each(const std::vector<std::string>& path,
                       const std::function<Error(std::string_view, std::string_view)>& fn) const {
  if (fd_ < 0) return Error(Code::kFailedPrecondition, "bbolt: reader not open");
  Scan scan(*this);
  Bucket b;
  b.root = meta_.root;
  // The bucket values found on the path are copied: the pages they live in
  // are gone once the scan that found them returns.
  std::string holder;
  for (const std::string& name : path) {
    bool found = false;
    std::string value;
    Error e = scan.bucket(b, [&](uint32_t flags, std::string_view k, std::string_view val) -> Error {
      if (!found && (flags & kBucketLeafFlag) && k == name) {
        found = true;
        value.assign(val);
      }
      return {};
    });
    if (e) return e;
    if (!found) return Error(Code::kNotFound, "bbolt: " + path_ + ": no bucket " + name);
    holder = std::move(value);
    if (Error e2 = scan.decode_bucket(holder, &b)) return e2;
  }
  return scan.bucket(b, [&](uint32_t flags, std::string_view k, std::string_view val) -> Error {
    if (flags & kBucketLeafFlag) return {};
    return fn(k, val);
  });
}

}  // namespace etcdq::bbolt
