#include "raft/log_writes.h"

extern "C" int __wrap_UvFsProbeCapabilities(const char* dir, size_t* direct, bool* async, char* errmsg) {
  int rv = __real_UvFsProbeCapabilities(dir, direct, async, errmsg);
  if (rv != 0) return rv;
  *direct = 0;     // buffered writes, 4 KiB blocks (uv.c: block size 4096 without direct I/O)
  *async = false;  // submitted from libuv's thread pool, synced there
  return 0;
}

namespace etcdq::raft {
namespace {
thread_local InlineWrites* t_inline = nullptr;
// Inside __wrap_UvWriterSubmit: the bytes of the append being submitted.
thread_local bool t_submitting = false;
thread_local size_t t_submit_bytes = 0;
}  // namespace

void set_inline_writes(InlineWrites* w) { t_inline = w; }
}  // namespace etcdq::raft

extern "C" int __wrap_UvWriterSubmit(struct UvWriter* w, struct UvWriterReq* req, const uv_buf_t bufs[], unsigned n,
                                     size_t offset, UvWriterReqCb cb) {
  using namespace etcdq::raft;
  size_t bytes = 0;
  for (unsigned i = 0; i < n; ++i) bytes += bufs[i].len;
  t_submitting = true;
  t_submit_bytes = bytes;
  int rv = __real_UvWriterSubmit(w, req, bufs, n, offset, cb);
  t_submitting = false;
  return rv;
}

extern "C" int __wrap_uv_queue_work(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after) {
  using namespace etcdq::raft;
  if (!t_submitting || t_inline == nullptr || !t_inline->take(t_submit_bytes)) {
    return __real_uv_queue_work(loop, req, work, after);
  }
  t_submitting = false;
  req->loop = loop;  // as uv_queue_work sets it; libraft reads only `data`
  work(req);         // the write and its sync (uvWriterWorkCb)
  t_inline->completed(req, after);
  return 0;
}
