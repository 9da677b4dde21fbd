#include "consensus/io.h"

#include <unistd.h>

#include <type_traits>

#include <spdlog/spdlog.h>

#include "consensus/libraft_patches.h"
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
  opened_ = true;
  return {};
}

void UvIo::close_once(struct raft_io* io, raft_io_close_cb cb) {
  static_assert(std::is_standard_layout_v<Guarded>, "raft_io* must convert back to Guarded*");
  auto* g = reinterpret_cast<Guarded*>(io);
  g->raft_cb = cb;
  g->fired = false;
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

int UvIo::send_noting(struct raft_io* io, struct raft_io_send* req, const struct raft_message* m,
                      raft_io_send_cb cb) {
  auto* g = reinterpret_cast<Guarded*>(io);
  if (m->type == RAFT_IO_INSTALL_SNAPSHOT) snapshot_on_wire(io, m->server_id);
  return g->uv_send(io, req, m, cb);
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
