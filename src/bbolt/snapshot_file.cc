#include "bbolt/snapshot_file.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace etcdq::bbolt {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Error io_error(const std::string& op, const std::string& path) {
  return errors::internal("snapshot: " + op + " " + path + ": " + std::strerror(errno));
}

// sha256 of the first `n` bytes of fd.
Error sha256_prefix(int fd, uint64_t n, const std::string& path, unsigned char out[32]) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    return errors::internal("snapshot: sha256 init failed");
  std::vector<char> buf(1 << 20);
  uint64_t off = 0;
  while (off < n) {
    size_t want = size_t(std::min<uint64_t>(buf.size(), n - off));
    ssize_t r = ::pread(fd, buf.data(), want, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error("read", path);
    if (r == 0) return Error(Code::kDataLoss, "snapshot: " + path + ": truncated (short read)");
    EVP_DigestUpdate(ctx.get(), buf.data(), size_t(r));
    off += uint64_t(r);
  }
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), out, &len);
  return {};
}

}  // namespace

Error append_sha256_trailer(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (f.fd < 0) return io_error("open", path);
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return io_error("stat", path);
  unsigned char sum[32];
  if (Error e = sha256_prefix(f.fd, uint64_t(st.st_size), path, sum)) return e;
  if (::pwrite(f.fd, sum, sizeof sum, st.st_size) != ssize_t(sizeof sum)) return io_error("write", path);
  if (::fsync(f.fd) != 0) return io_error("fsync", path);
  return {};
}

Error check_sha256_trailer(const std::string& path, uint64_t* db_bytes) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return io_error("open", path);
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return io_error("stat", path);
  const uint64_t size = uint64_t(st.st_size);
  if (size < kSha256Bytes || size % 512 != kSha256Bytes)
    return Error(Code::kDataLoss, "snapshot: " + path + ": snapshot missing hash (size " + std::to_string(size) +
                                      " is not whole 512-byte blocks plus a 32-byte sha256; truncated?)");
  const uint64_t n = size - kSha256Bytes;
  unsigned char want[32], got[32];
  ssize_t r = ::pread(f.fd, want, sizeof want, off_t(n));
  if (r != ssize_t(sizeof want)) return io_error("read", path);
  if (Error e = sha256_prefix(f.fd, n, path, got)) return e;
  if (std::memcmp(want, got, sizeof want) != 0)
    return Error(Code::kDataLoss, "snapshot: " + path + ": sha256 mismatch (file corrupt)");
  *db_bytes = n;
  return {};
}

}  // namespace etcdq::bbolt
