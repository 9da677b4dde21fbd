#include "raft/transport.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "raft/wire_check.h"

namespace etcdq::raft {
namespace {

// How long a connect waits for the peer's gRPC server before libraft is told
// it failed (libraft then retries on its own schedule).
constexpr std::chrono::milliseconds kConnectTimeout{1000};

bool write_all(int fd, const std::string& bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::send(fd, p, left, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

struct GrpcTransport::Shared : std::enable_shared_from_this<GrpcTransport::Shared> {
  uv_loop_t* loop = nullptr;
  ChannelFor channel_for;
  struct raft_uv_transport t {};
  uv_async_t async{};

  // Set by init (before the loop runs), read-only afterwards.
  raft_id self_id = 0;
  std::string self_address;

  std::mutex mu;  // guards open, listening, incoming and tasks
  bool open = false;       // other threads may post tasks
  bool listening = false;  // libraft accepts incoming streams
  int incoming = 0;        // incoming streams being served
  std::vector<std::function<void()>> tasks;

  // Loop thread only.
  raft_uv_accept_cb accept_cb = nullptr;
  raft_uv_transport_close_cb close_cb = nullptr;
  bool closing = false;
  struct Connecting {
    struct raft_uv_connect* req;
    raft_uv_connect_cb cb;
  };
  std::map<uint64_t, Connecting> connecting;  // connects libraft still waits for
  uint64_t next_connect = 1;

  // Runs `fn` on the loop thread; false once the transport closed.
  bool post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu);
    if (!open) return false;
    tasks.push_back(std::move(fn));
    uv_async_send(&async);
    return true;
  }

  // Loop thread: a stream libraft owns (and frees with raft_free) on `fd`.
  uv_stream_t* adopt(int fd) {
    auto* pipe = static_cast<uv_pipe_t*>(raft_malloc(sizeof(uv_pipe_t)));
    if (pipe == nullptr) return nullptr;
    uv_pipe_init(loop, pipe, 0);
    if (uv_pipe_open(pipe, fd) != 0) {
      uv_close(reinterpret_cast<uv_handle_t*>(pipe), [](uv_handle_t* h) { raft_free(h); });
      return nullptr;
    }
    return reinterpret_cast<uv_stream_t*>(pipe);
  }

  // Loop thread: answers the connect `key` once.
  void connected(uint64_t key, int fd, int status) {
    auto it = connecting.find(key);
    if (it == connecting.end()) {
      if (fd >= 0) ::close(fd);
      return;
    }
    Connecting c = it->second;
    connecting.erase(it);
    if (closing) status = RAFT_CANCELED;
    uv_stream_t* stream = nullptr;
    if (status == 0) {
      stream = adopt(fd);
      if (stream == nullptr) status = RAFT_NOCONNECTION;
    } else if (fd >= 0) {
      ::close(fd);
    }
    c.cb(c.req, stream, status);
  }

  void drain() {
    std::vector<std::function<void()>> now;
    {
      std::lock_guard<std::mutex> lock(mu);
      now.swap(tasks);
      if (closing) open = false;  // nothing is posted after this
    }
    for (auto& fn : now) fn();
    if (!closing) return;
    std::vector<std::function<void()>> late;
    {
      std::lock_guard<std::mutex> lock(mu);
      late.swap(tasks);
    }
    for (auto& fn : late) fn();
    auto pending = std::move(connecting);
    connecting.clear();
    for (auto& [key, c] : pending) c.cb(c.req, nullptr, RAFT_CANCELED);
    if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&async))) {
      uv_close(reinterpret_cast<uv_handle_t*>(&async), [](uv_handle_t* h) {
        auto* self = static_cast<Shared*>(h->data);
        if (self->close_cb) self->close_cb(&self->t);
      });
    }
  }

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
    frame.set_from_id(self_id);
    frame.set_from_address(self_address);
    int fds[2];
    if (!writer->Write(frame) || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      ctx.TryCancel();
      writer->Finish();
      fail(RAFT_NOCONNECTION);
      return;
    }
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

  // ---- raft_uv_transport callbacks (loop thread) ---------------------------

  static Shared* of(struct raft_uv_transport* t) { return static_cast<Shared*>(t->impl); }

  static int on_init(struct raft_uv_transport* t, raft_id id, const char* address) {
    Shared* self = of(t);
    self->self_id = id;
    self->self_address = address;
    if (uv_async_init(self->loop, &self->async, [](uv_async_t* a) { static_cast<Shared*>(a->data)->drain(); }) != 0) {
      return RAFT_IOERR;
    }
    self->async.data = self;
    std::lock_guard<std::mutex> lock(self->mu);
    self->open = true;
    return 0;
  }

  static int on_listen(struct raft_uv_transport* t, raft_uv_accept_cb cb) {
    Shared* self = of(t);
    self->accept_cb = cb;
    std::lock_guard<std::mutex> lock(self->mu);
    self->listening = true;
    return 0;
  }

  static int on_connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id, const char* address,
                        raft_uv_connect_cb cb) {
    Shared* self = of(t);
    if (self->closing) return RAFT_CANCELED;
    uint64_t key = self->next_connect++;
    self->connecting[key] = Connecting{req, cb};
    std::thread([self = self->shared_from_this(), key, address = std::string(address)] {
      self->connect_and_pump(key, address);
    }).detach();
    return 0;
  }

  static void on_close(struct raft_uv_transport* t, raft_uv_transport_close_cb cb) {
    Shared* self = of(t);
    self->closing = true;
    self->close_cb = cb;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      self->listening = false;
    }
    uv_async_send(&self->async);
  }
};

// Receives one member's libraft stream and feeds it to libraft.
class GrpcTransport::Service final : public peer::RaftTransport::Service {
 public:
  explicit Service(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  grpc::Status Stream(grpc::ServerContext* ctx, grpc::ServerReader<peer::RaftFrame>* reader,
                      peer::RaftStreamEnd*) override {
    peer::RaftFrame frame;
    if (!reader->Read(&frame)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no handshake");
    if (frame.from_id() == 0 || frame.from_address().empty() || frame.from_address().size() > kMaxAddressBytes) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad handshake");
    }
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (!shared_->listening) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not accepting yet");
      if (shared_->incoming >= kMaxIncomingStreams) {
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many Raft streams");
      }
      ++shared_->incoming;
    }
    struct Release {
      Shared* s;
      ~Release() {
        std::lock_guard<std::mutex> lock(s->mu);
        --s->incoming;
      }
    } release{shared_.get()};
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "cannot open a stream");
    }
    raft_id id = frame.from_id();
    std::string address = frame.from_address();
    int libraft_end = fds[0];
    bool posted = shared_->post([self = shared_, id, address, libraft_end] {
      if (self->closing || self->accept_cb == nullptr) {
        ::close(libraft_end);
        return;
      }
      uv_stream_t* stream = self->adopt(libraft_end);
      if (stream != nullptr) self->accept_cb(&self->t, id, address.c_str(), stream);
    });
    if (!posted) {
      ::close(fds[0]);
      ::close(fds[1]);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "closed");
    }
    // libraft trusts its framing (raft/wire_check.h): bytes reach it only
    // once checked, and the first malformed message ends the stream.
    WireCheck check;
    auto pass = [&](const std::string& bytes) {
      if (!check.feed(bytes)) return false;
      return bytes.empty() || write_all(fds[1], bytes);
    };
    bool ok = pass(frame.data());
    while (ok && reader->Read(&frame)) ok = pass(frame.data());
    ::close(fds[1]);  // libraft reads the end of the stream
    if (!check.error().empty()) {
      spdlog::warn("dropped the Raft stream from member {:x} ({}, connected from {}): {}", id, address, ctx->peer(),
                   check.error());
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "malformed Raft message: " + check.error());
    }
    return grpc::Status::OK;
  }

 private:
  std::shared_ptr<Shared> shared_;
};

GrpcTransport::GrpcTransport(uv_loop_t* loop, ChannelFor channel_for) : shared_(std::make_shared<Shared>()) {
  shared_->loop = loop;
  shared_->channel_for = std::move(channel_for);
  shared_->t.impl = shared_.get();
  shared_->t.init = Shared::on_init;
  shared_->t.listen = Shared::on_listen;
  shared_->t.connect = Shared::on_connect;
  shared_->t.close = Shared::on_close;
  service_ = std::make_unique<Service>(shared_);
}

GrpcTransport::~GrpcTransport() = default;

struct raft_uv_transport* GrpcTransport::raw() { return &shared_->t; }

grpc::Service* GrpcTransport::service() { return service_.get(); }

}  // namespace etcdq::raft
