#include "bbolt/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bbolt/format.h"

namespace etcdq::bbolt {

namespace {

constexpr size_t kOutputBufferBytes = 1 << 20;

Error usage(std::string what) { return Error(Code::kInvalidArgument, "bbolt writer: " + what); }

size_t element_bytes(const std::string& key, const std::string& value) {
  return kElementSize + key.size() + value.size();
}

}  // namespace

Writer::Writer() { open_.emplace_back(); }

Writer::~Writer() {
  if (fd_ >= 0) ::close(fd_);
  if (!path_.empty() && !finished_) ::unlink(path_.c_str());
}

Error Writer::fail(Error e) {
  if (error_.ok()) error_ = e;
  return e;
}

Error Writer::open(const std::string& path) {
  if (fd_ >= 0 || !path_.empty()) return usage("already open");
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ < 0) return fail(errors::internal("bbolt: cannot create " + path + ": " + std::strerror(errno)));
  path_ = path;
  out_offset_ = next_pgid_ * kPageSize;
  return {};
}

Error Writer::check_key(Tree& t, std::string_view key) {
  if (key.empty()) return usage("empty key");
  if (key.size() > kMaxKeySize) return usage("key longer than 32768 bytes");
  if (t.has_last && std::string_view(t.last_key).compare(key) >= 0)
    return usage("keys out of order or repeated");
  t.last_key.assign(key);
  t.has_last = true;
  return {};
}

Error Writer::begin_bucket(std::string_view name) {
  if (error_) return error_;
  if (fd_ < 0) return usage("not open");
  if (Error e = check_key(open_.back(), name)) return fail(e);
  Tree t;
  t.name.assign(name);
  open_.push_back(std::move(t));
  return {};
}

Error Writer::put(std::string_view key, std::string_view value) {
  if (error_) return error_;
  if (fd_ < 0) return usage("not open");
  if (open_.size() == 1) return fail(usage("put outside a bucket"));
  if (value.size() > kMaxValueSize) return fail(usage("value too large"));
  if (Error e = check_key(open_.back(), key)) return fail(e);
  Entry e;
  e.key.assign(key);
  e.value.assign(value);
  return add(open_.back(), 0, std::move(e));
}

Error Writer::end_bucket() {
  if (error_) return error_;
  if (open_.size() <= 1) return fail(usage("end_bucket without an open bucket"));
  uint64_t root = 0;
  if (Error e = finish_tree(open_.back(), &root)) return fail(e);
  Entry e;
  e.flags = kBucketLeafFlag;
  e.key = std::move(open_.back().name);
  e.value.assign(kBucketHeaderSize, '\0');
  put64(e.value.data(), root);  // sequence stays 0
  open_.pop_back();
  return add(open_.back(), 0, std::move(e));
}

// Adds an element to `level` of `t`, first writing out the page being built
// there if the element does not fit. A page keeps at least two elements (as
// bbolt's minKeysPerPage), so large elements share a page with overflow:
// with one per page, branch keys larger than a page would give every level
// as many pages as the one below, and the tree would never reach a root.
Error Writer::add(Tree& t, size_t level, Entry e) {
  if (t.levels.size() <= level) t.levels.resize(level + 1);
  size_t bytes = element_bytes(e.key, e.value);
  {
    Level& l = t.levels[level];
    bool full = (l.entries.size() >= 2 && l.bytes + bytes > kPageSize) || l.entries.size() >= 0xFFFF;
    if (full) {
      if (Error err = flush_level(t, level)) return err;
    }
  }
  Level& l = t.levels[level];
  if (l.entries.empty()) l.bytes = kPageHeaderSize;
  l.bytes += bytes;
  l.entries.push_back(std::move(e));
  return {};
}

// Writes the page being built at `level` and adds its first key and pgid to
// the level above.
Error Writer::flush_level(Tree& t, size_t level) {
  uint64_t pgid = 0;
  bool leaf = level == 0;
  std::vector<Entry> entries = std::move(t.levels[level].entries);
  t.levels[level].entries.clear();
  t.levels[level].bytes = 0;
  t.levels[level].pages_written++;
  if (Error e = write_page(leaf ? kLeafPage : kBranchPage, entries, leaf, &pgid)) return e;
  Entry up;
  up.key = entries.empty() ? std::string() : std::move(entries.front().key);
  up.child = pgid;
  return add(t, level + 1, std::move(up));
}

// Writes out every partial page from the leaves up and returns the root.
Error Writer::finish_tree(Tree& t, uint64_t* root) {
  if (t.levels.empty()) t.levels.resize(1);
  for (size_t i = 0;; ++i) {
    bool empty_bucket = i == 0 && t.levels[0].pages_written == 0;
    if (!t.levels[i].entries.empty() || empty_bucket) {
      if (Error e = flush_level(t, i)) return e;
    }
    // The level above holds the root once it is the top and points at a
    // single page.
    if (i + 2 == t.levels.size() && t.levels[i + 1].pages_written == 0 &&
        t.levels[i + 1].entries.size() == 1) {
      *root = t.levels[i + 1].entries[0].child;
      return {};
    }
  }
}

Error Writer::write_page(uint16_t flags, const std::vector<Entry>& entries, bool leaf, uint64_t* pgid) {
  size_t bytes = kPageHeaderSize;
  for (const Entry& e : entries) bytes += element_bytes(e.key, e.value);
  uint64_t npages = (bytes + kPageSize - 1) / kPageSize;
  if (npages - 1 > 0xFFFFFFFFULL) return usage("page too large");
  page_.assign(npages * kPageSize, '\0');
  char* p = page_.data();
  put64(p, next_pgid_);
  put16(p + 8, flags);
  put16(p + 10, uint16_t(entries.size()));
  put32(p + 12, uint32_t(npages - 1));
  size_t data = kPageHeaderSize + entries.size() * kElementSize;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    size_t elem = kPageHeaderSize + i * kElementSize;
    char* el = p + elem;
    uint32_t pos = uint32_t(data - elem);
    if (leaf) {
      put32(el, e.flags);
      put32(el + 4, pos);
      put32(el + 8, uint32_t(e.key.size()));
      put32(el + 12, uint32_t(e.value.size()));
    } else {
      put32(el, pos);
      put32(el + 4, uint32_t(e.key.size()));
      put64(el + 8, e.child);
    }
    std::memcpy(p + data, e.key.data(), e.key.size());
    data += e.key.size();
    if (leaf) {
      std::memcpy(p + data, e.value.data(), e.value.size());
      data += e.value.size();
    }
  }
  *pgid = next_pgid_;
  next_pgid_ += npages;
  out_ += page_;
  if (out_.size() >= kOutputBufferBytes) return flush_output();
  return {};
}

Error Writer::flush_output() {
  size_t done = 0;
  while (done < out_.size()) {
    ssize_t n = ::pwrite(fd_, out_.data() + done, out_.size() - done, off_t(out_offset_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(errors::internal("bbolt: write " + path_ + ": " + std::strerror(errno)));
    done += size_t(n);
  }
  out_offset_ += out_.size();
  out_.clear();
  return {};
}

Error Writer::finish() {
  if (error_) return error_;
  if (fd_ < 0) return usage("not open");
  if (open_.size() != 1) return fail(usage("finish with a bucket still open"));
  uint64_t root = 0;
  if (Error e = finish_tree(open_[0], &root)) return fail(e);
  if (Error e = flush_output()) return e;

  // Pages 0-2: the two meta pages and an empty freelist (bbolt's own
  // db.init() layout), so that any bbolt, with or without NoFreelistSync,
  // opens the file without rewriting it.
  std::string head(3 * kPageSize, '\0');
  for (uint64_t i = 0; i < 2; ++i) {
    char* p = head.data() + i * kPageSize;
    put64(p, i);
    put16(p + 8, kMetaPage);
    Meta m;
    m.magic = kMagic;
    m.version = kVersion;
    m.page_size = kPageSize;
    m.root = root;
    m.freelist = 2;
    m.pgid = next_pgid_;
    m.txid = i;  // bbolt keeps txid % 2 == page id
    encode_meta(m, p + kPageHeaderSize);
  }
  put64(head.data() + 2 * kPageSize, 2);
  put16(head.data() + 2 * kPageSize + 8, kFreelistPage);
  out_ = std::move(head);
  out_offset_ = 0;
  if (Error e = flush_output()) return e;
  if (::fsync(fd_) != 0) return fail(errors::internal("bbolt: fsync " + path_ + ": " + std::strerror(errno)));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return fail(errors::internal("bbolt: close " + path_ + ": " + std::strerror(errno)));
  finished_ = true;
  return {};
}

}  // namespace etcdq::bbolt
