#include "raft/transport.h"

#include <spdlog/spdlog.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

#include "raft/uv_bridge.h"
#include "raft/wire_check.h"

namespace etcdq::raft {
namespace {

// How long a connect waits for the peer's gRPC server before libraft is told
// it failed (libraft then retries on its own schedule).
constexpr std::chrono::milliseconds kConnectTimeout{1000};

// Socketpair buffers: libuv writes libraft's messages without blocking, so
// a buffer that holds a whole AppendEntries batch takes it in one write and
// one wakeup instead of many partial ones (AF_UNIX's default is 208 KiB;
// the kernel caps this at net.core.wmem_max).
constexpr int kSocketBufferBytes = 4 << 20;

void size_buffers(const int fds[2]) {
  for (int i = 0; i < 2; ++i) {
    ::setsockopt(fds[i], SOL_SOCKET, SO_SNDBUF, &kSocketBufferBytes, sizeof kSocketBufferBytes);
    ::setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &kSocketBufferBytes, sizeof kSocketBufferBytes);
  }
}

}  // namespace

// The gRPC side of the transport; UvBridge is its libuv side.
struct GrpcTransport::Shared : UvBridge, std::enable_shared_from_this<GrpcTransport::Shared> {
  Shared(uv_loop_t* loop, ChannelFor channel_for) : UvBridge(loop), channel_for(std::move(channel_for)) {}

  ChannelFor channel_for;

  std::mutex incoming_mu;  // guards incoming
  int incoming = 0;        // incoming streams being served

  // A connect's own thread: opens the stream, hands libraft its end, then
  // pumps libraft's bytes into the call until either side ends.
  void connect_and_pump(uint64_t key, const std::string& address) {
    auto fail = [&](int status) { post([self = shared_from_this(), key, status] { self->connected(key, -1, status); }); };
    std::shared_ptr<grpc::Channel> channel = channel_for(address);
    if (!channel || !channel->WaitForConnected(std::chrono::system_clock::now() + kConnectTimeout)) {
      fail(RAFT_NOCONNECTION);
      return;
    }
    auto stub = peer::RaftTransport::NewStub(channel);
    grpc::ClientContext ctx;
    peer::RaftStreamEnd end;
    std::unique_ptr<grpc::ClientWriter<peer::RaftFrame>> writer = stub->Stream(&ctx, &end);
    peer::RaftFrame frame;
    frame.set_from_id(id());
    frame.set_from_address(UvBridge::address());  // ours, not `address`
    int fds[2];
    if (!writer->Write(frame) || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      ctx.TryCancel();
      writer->Finish();
      fail(RAFT_NOCONNECTION);
      return;
    }
    size_buffers(fds);
    int libraft_end = fds[0];
    if (!post([self = shared_from_this(), key, libraft_end] { self->connected(key, libraft_end, 0); })) {
      ::close(fds[0]);
      ::close(fds[1]);
      ctx.TryCancel();
      writer->Finish();
      return;
    }
    std::string buf(kFrameBytes, '\0');
    bool eof = false;
    for (;;) {
      ssize_t n = ::read(fds[1], buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof = true;  // libraft closed its end (or the socketpair failed)
        break;
      }
      frame.Clear();
      frame.set_data(buf.data(), static_cast<size_t>(n));
      if (!writer->Write(frame)) break;  // the call broke: libraft's next write fails
    }
    // libraft writes to its end fail from here on (it then reconnects).
    ::close(fds[1]);
    if (eof) {
      writer->WritesDone();
    } else {
      ctx.TryCancel();
    }
    writer->Finish();
  }

  // Loop thread: each connect gets a thread of its own (connect_and_pump).
  void start_connect(uint64_t key, raft_id, const char* address) override {
    std::thread([self = shared_from_this(), key, address = std::string(address)] {
      self->connect_and_pump(key, address);
    }).detach();
  }
};

// Receives one member's libraft stream and feeds it to libraft. A reactor
// (not a handler thread): each frame is checked and written into the
// socketpair on the gRPC thread that read it, so a message crosses one
// thread less on its way to libraft's loop. Writes do not block that
// thread: when libraft lags and the socketpair is full, a thread of the
// stream's own waits for room, then reads on.
class GrpcTransport::Incoming final : public grpc::ServerReadReactor<peer::RaftFrame> {
 public:
  Incoming(std::shared_ptr<Shared> shared, grpc::CallbackServerContext* ctx)
      : shared_(std::move(shared)), ctx_(ctx) {
    StartRead(&frame_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the sender finished, or the call broke
      finish(fd_ < 0 ? grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no handshake") : grpc::Status::OK);
      return;
    }
    if (fd_ < 0) {
      grpc::Status s = accept();
      if (!s.ok()) {
        finish(s);
        return;
      }
    }
    // libraft trusts its framing (raft/wire_check.h): bytes reach it only
    // once checked, and the first malformed message ends the stream.
    if (!check_.feed(frame_.data())) {
      spdlog::warn("dropped the Raft stream from member {:x} ({}, connected from {}): {}", id_, address_,
                   ctx_->peer(), check_.error());
      finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "malformed Raft message: " + check_.error()));
      return;
    }
    pending_.swap(*frame_.mutable_data());
    sent_ = 0;
    if (send_some()) {
      StartRead(&frame_);
      return;
    }
    if (errno != EAGAIN) {
      finish(grpc::Status::OK);  // libraft closed its end
      return;
    }
    std::thread([this] { wait_and_send(); }).detach();
  }

  void OnCancel() override { cancelled_ = true; }

  void OnDone() override {
    if (counted_) {
      std::lock_guard<std::mutex> lock(shared_->incoming_mu);
      --shared_->incoming;
    }
    delete this;
  }

 private:
  // The handshake frame: who sends, and room for one more stream.
  grpc::Status accept() {
    if (frame_.from_id() == 0 || frame_.from_address().empty() ||
        frame_.from_address().size() > GrpcTransport::kMaxAddressBytes) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad handshake");
    }
    {
      std::lock_guard<std::mutex> lock(shared_->incoming_mu);
      if (!shared_->listening()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not accepting yet");
      if (shared_->incoming >= GrpcTransport::kMaxIncomingStreams) {
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many Raft streams");
      }
      ++shared_->incoming;
      counted_ = true;
    }
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "cannot open a stream");
    }
    size_buffers(fds);
    id_ = frame_.from_id();
    address_ = frame_.from_address();
    int libraft_end = fds[0];
    bool posted = shared_->post(
        [self = shared_, id = id_, address = address_, libraft_end] { self->accept(id, address, libraft_end); });
    if (!posted) {
      ::close(fds[0]);
      ::close(fds[1]);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "closed");
    }
    fd_ = fds[1];
    return grpc::Status::OK;
  }

  // Writes what it can of pending_ without blocking; false on EAGAIN or an
  // error (errno tells which).
  bool send_some() {
    while (sent_ < pending_.size()) {
      ssize_t n = ::send(fd_, pending_.data() + sent_, pending_.size() - sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent_ += static_cast<size_t>(n);
    }
    return true;
  }

  // A thread of its own: libraft's loop is behind, so wait for room (the
  // sender's next frames wait in gRPC's flow control meanwhile).
  void wait_and_send() {
    while (!cancelled_) {
      struct pollfd p {fd_, POLLOUT, 0};
      int r = ::poll(&p, 1, 100);
      if (r < 0 && errno != EINTR) break;
      if (r <= 0) continue;
      if (send_some()) {
        StartRead(&frame_);
        return;
      }
      if (errno != EAGAIN) break;
    }
    finish(cancelled_ ? grpc::Status::CANCELLED : grpc::Status::OK);
  }

  void finish(grpc::Status s) {
    if (fd_ >= 0) ::close(fd_);  // libraft reads the end of the stream
    fd_ = -1;
    Finish(s);
  }

  std::shared_ptr<GrpcTransport::Shared> shared_;
  grpc::CallbackServerContext* ctx_;
  // One actor at a time touches the rest: the gRPC thread running
  // OnReadDone, or the waiting thread it started (no read is outstanding
  // while that runs).
  peer::RaftFrame frame_;
  WireCheck check_;
  int fd_ = -1;  // our end of the socketpair; libraft reads the other
  bool counted_ = false;
  raft_id id_ = 0;
  std::string address_;
  std::string pending_;
  size_t sent_ = 0;
  std::atomic<bool> cancelled_{false};
};

class GrpcTransport::Service final : public peer::RaftTransport::CallbackService {
 public:
  explicit Service(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  grpc::ServerReadReactor<peer::RaftFrame>* Stream(grpc::CallbackServerContext* ctx, peer::RaftStreamEnd*) override {
    return new Incoming(shared_, ctx);
  }

 private:
  std::shared_ptr<Shared> shared_;
};

GrpcTransport::GrpcTransport(uv_loop_t* loop, ChannelFor channel_for)
    : shared_(std::make_shared<Shared>(loop, std::move(channel_for))) {
  service_ = std::make_unique<Service>(shared_);
}

GrpcTransport::~GrpcTransport() = default;

struct raft_uv_transport* GrpcTransport::raw() { return shared_->raw(); }

grpc::Service* GrpcTransport::service() { return service_.get(); }

}  // namespace etcdq::raft
