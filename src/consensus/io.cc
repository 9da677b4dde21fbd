#include "consensus/io.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <type_traits>

#include <spdlog/spdlog.h>

#include "common/log_limiter.h"
#include "consensus/libraft_patches.h"
#include "consensus/metrics.h"
#include "consensus/transport.h"

namespace etcdq::consensus {

Error UvIo::open(const std::string& dir) {
  struct raft_io* io = &guarded_.io;
  if (int rv = raft_uv_init(io, loop_, dir.c_str(), transport_); rv != 0) {
    std::string msg = io->errmsg;
    // raft_uv_init frees what it made when it fails.
    return errors::internal("cannot open the Raft log in " + dir + ": " + msg);
  }
  raft_uv_set_connect_retry_delay(io, kConnectRetryDelayMs);
  guarded_.uv_close = io->close;
  io->close = close_once;
  guarded_.uv_send = io->send;
  io->send = send_noting;
  guarded_.self = this;
  opened_ = true;
  return {};
}

void UvIo::close_once(struct raft_io* io, raft_io_close_cb cb) {
  static_assert(std::is_standard_layout_v<Guarded>, "raft_io* must convert back to Guarded*");
  auto* g = reinterpret_cast<Guarded*>(io);
  g->raft_cb = cb;
  g->fired = false;
  // As raft_uv cancels the sends it still queues (uv_send.c, closeClient):
  // libraft's callbacks run before its close completes.
  UvIo* self = g->self;
  self->answer_dropped(RAFT_CANCELED);
  if (self->drop_timer_open_) {
    self->drop_timer_open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&self->drop_timer_), nullptr);
  }
  g->uv_close(io, [](struct raft_io* io) {
    auto* g = reinterpret_cast<Guarded*>(io);
    if (g->fired) {
      // libraft 0.15 calls it again when a segment writer closed late.
      spdlog::debug("libraft called the Raft I/O close callback again (ignored)");
      return;
    }
    g->fired = true;
    if (g->raft_cb != nullptr) g->raft_cb(io);
  });
}

namespace {

// About what raft_uv encodes for `m` (uv_encoding.c): the entries' or the
// snapshot's bytes plus headers, estimated high.
size_t uvio_message_bytes(const struct raft_message& m) {
  size_t bytes = 64;
  if (m.type == RAFT_IO_APPEND_ENTRIES) {
    const struct raft_append_entries& a = m.append_entries;
    for (unsigned i = 0; i < a.n_entries; ++i) bytes += 16 + a.entries[i].buf.len;
  } else if (m.type == RAFT_IO_INSTALL_SNAPSHOT) {
    const struct raft_install_snapshot& s = m.install_snapshot;
    bytes += s.data.len + 64 * static_cast<size_t>(s.conf.n);
  }
  return bytes;
}

LogLimiter& uvio_send_queue_log() {
  static LogLimiter limiter(10, std::chrono::minutes(1));
  return limiter;
}

}  // namespace

int UvIo::send_noting(struct raft_io* io, struct raft_io_send* req, const struct raft_message* m,
                      raft_io_send_cb cb) {
  auto* g = reinterpret_cast<Guarded*>(io);
  UvIo* self = g->self;
  const size_t bytes = uvio_message_bytes(*m);
  SendQueue& q = self->queues_[m->server_id];
  if (q.bytes > 0 && q.bytes + bytes > kMaxSendQueueBytes) {
    self->drop(req, cb, m->server_id, q, bytes);
    return 0;
  }
  if (m->type == RAFT_IO_INSTALL_SNAPSHOT) snapshot_on_wire(io, m->server_id);
  auto* t = new Tracked{self, req->data, cb, m->server_id, bytes};
  req->data = t;
  if (int rv = g->uv_send(io, req, m, sent); rv != 0) {
    req->data = t->data;
    delete t;
    return rv;
  }
  q.bytes += bytes;
  return 0;
}

void UvIo::sent(struct raft_io_send* req, int status) {
  auto* t = static_cast<Tracked*>(req->data);
  req->data = t->data;
  raft_io_send_cb cb = t->cb;
  SendQueue& q = t->self->queues_[t->to];
  q.bytes -= std::min(q.bytes, t->bytes);
  if (q.over && q.bytes <= kMaxSendQueueBytes / 2) {
    q.over = false;
    uint64_t suppressed = 0;
    if (uvio_send_queue_log().allow(&suppressed)) {
      spdlog::info("Raft messages to member {:x} are being written again: {} were dropped while its queue was full{}",
                   t->to, q.dropped,
                   suppressed > 0 ? fmt::format(" ({} such lines left out)", suppressed) : std::string());
    }
    q.dropped = 0;
  }
  delete t;
  if (cb != nullptr) cb(req, status);
}

void UvIo::drop(struct raft_io_send* req, raft_io_send_cb cb, raft_id to, SendQueue& q, size_t bytes) {
  peer_sent_failures(to).Increment();
  ++q.dropped;
  if (!q.over) {
    q.over = true;
    uint64_t suppressed = 0;
    if (uvio_send_queue_log().allow(&suppressed)) {
      spdlog::warn(
          "member {:x} is not reading its Raft messages: {} bytes wait to be written to it and a {}-byte message "
          "would pass the {}-byte bound; messages to it are dropped until that drains (it gets a snapshot if it "
          "falls behind the log){}",
          to, q.bytes, bytes, kMaxSendQueueBytes,
          suppressed > 0 ? fmt::format(" ({} such lines left out)", suppressed) : std::string());
    }
  }
  dropped_.push_back(Dropped{req, cb});
  if (!drop_timer_open_) {
    uv_timer_init(loop_, &drop_timer_);
    drop_timer_.data = this;
    drop_timer_open_ = true;
  }
  // libraft hears of the drop on the loop's next turn, not inside its send.
  uv_timer_start(
      &drop_timer_, [](uv_timer_t* timer) { static_cast<UvIo*>(timer->data)->answer_dropped(RAFT_NOCONNECTION); }, 0,
      0);
}

void UvIo::answer_dropped(int status) {
  // A callback may send again (and drop again): those wait for the next turn.
  std::vector<Dropped> now;
  now.swap(dropped_);
  for (const Dropped& d : now) {
    if (d.cb != nullptr) d.cb(d.req, status);
  }
}

void UvIo::close() {
  if (!opened_) return;
  opened_ = false;
  raft_uv_close(&guarded_.io);
}

void RaftIo::adopt(int fd) { ::close(fd); }

namespace {

class PeerUvIo final : public RaftIo {
 public:
  PeerUvIo(uv_loop_t* loop, PeerTransport::Options opts) : transport_(loop, std::move(opts)), uv_(loop, transport_.raw()) {}
  Error open(const std::string& dir) override { return uv_.open(dir); }
  struct raft_io* get() override { return uv_.get(); }
  void close() override { uv_.close(); }
  void adopt(int fd) override { transport_.adopt(fd); }
  void set_sender_filter(std::function<bool(raft_id)> accepts) override {
    transport_.set_sender_filter(std::move(accepts));
  }

 private:
  PeerTransport transport_;
  UvIo uv_;
};

}  // namespace

std::unique_ptr<RaftIo> peer_uv_io(uv_loop_t* loop, std::shared_ptr<Forwarder>,
                                   std::function<void(int tcp, int plain, const std::string& host)> tls_dial) {
  PeerTransport::Options opts;
  opts.tls_dial = std::move(tls_dial);
  return std::make_unique<PeerUvIo>(loop, std::move(opts));
}

}  // namespace etcdq::consensus
