#include "raft/log_writes.h"

extern "C" int __wrap_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg) {
  int rv = __real_UvFsProbeCapabilities(dir, direct, async, errmsg);
  if (rv != 0) return rv;
  *direct = 0;     // buffered writes, 4 KiB blocks (uv.c: block size 4096 without direct I/O)
  *async = false;  // submitted from libuv's thread pool, synced there
  return 0;
}
