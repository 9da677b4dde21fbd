#include "raft/written_segments.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace {
// The zeros written at a time: 64 syncs of an 8 MiB segment (libraft opens it
// O_DSYNC), off the consensus thread.
constexpr size_t kChunkBytes = 128 * 1024;
alignas(4096) const char kZeros[kChunkBytes] = {};
}  // namespace

extern "C" int __wrap_posix_fallocate(int fd, off_t offset, off_t len) {
  if (int rv = __real_posix_fallocate(fd, offset, len); rv != 0) return rv;
  off_t at = offset;
  const off_t end = offset + len;
  while (at < end) {
    size_t n = static_cast<size_t>(end - at) < kChunkBytes ? static_cast<size_t>(end - at) : kChunkBytes;
    ssize_t w = ::pwrite(fd, kZeros, n, at);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    at += w;
  }
  return 0;
}
