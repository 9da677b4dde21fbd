#include "raft/written_segments.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace {
// The zeros written at a time: 8 synced writes (libraft opens the segment
// O_DSYNC, so each is a journal commit) for an 8 MiB segment, off the
// consensus thread. Never written to: in .bss, so reading it maps the zero
// page and costs no memory.
constexpr size_t kChunkBytes = 1 << 20;
alignas(4096) char kZeros[kChunkBytes];
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
  // The zeros went through the page cache, where they need not stay:
  // appends write whole blocks, so none is read back. O_DSYNC left the
  // pages clean, so they can go. Advice only: a failure costs memory the
  // kernel reclaims anyway, not a wrong append.
  (void)::posix_fadvise(fd, offset, len, POSIX_FADV_DONTNEED);
  return 0;
}
