// An in-process network for raft::Node (test double, header-only): the
// test decides which member hears which, without a socket or a port.
//
// Why raft_uv with an in-memory transport rather than libraft's fixture
// (raft/fixture.h, whose stub I/O apply_cluster_test.cc uses): the fixture
// steps one libraft instance by hand and cannot run raft::Node, whose roles
// live on its own consensus thread and libuv loop. Replacing only the
// raft_uv_transport (NodeOptions::io) keeps everything else real: the
// consensus thread, its loop and timers, the log and its fsyncs in a
// temporary directory, restarts from that log. Time is real, so the tests
// wait for outcomes with deadlines instead of stepping.
//
// Each connection libraft opens (it only writes on it; the receiver only
// reads, libraft 0.15 uv_send.c / uv_recv.c) is two pipes joined by a relay
// thread: sender -> pipe -> relay -> pipe -> receiver. Blocking a direction
// cuts the relays of that direction (both ends see a broken stream, as
// after a TCP reset) and refuses new connections, so libraft loses exactly
// the messages a real partition would lose and retries as it does then.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "raft/io.h"

namespace etcdq::testing {

class MemoryNetwork;

// One member's raft_uv_transport. Loop-side state is touched on the
// member's consensus thread only; other threads hand it work through post().
class MemoryEndpoint : public std::enable_shared_from_this<MemoryEndpoint> {
 public:
  MemoryEndpoint(uv_loop_t* loop, std::weak_ptr<MemoryNetwork> net) : loop_(loop), net_(std::move(net)) {
    t_.impl = this;
    t_.init = on_init;
    t_.listen = on_listen;
    t_.connect = on_connect;
    t_.close = on_close;
  }
  struct raft_uv_transport* raw() { return &t_; }
  uint64_t id() const { return id_; }
  const std::string& address() const { return address_; }

  // Runs `fn` on the consensus thread; false once the transport closed.
  bool post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return false;
    tasks_.push_back(std::move(fn));
    uv_async_send(&async_);
    return true;
  }
  bool listening() {
    std::lock_guard<std::mutex> lock(mu_);
    return listening_;
  }
  // Consensus thread: hands libraft an incoming stream read from `fd`.
  void accept(uint64_t from, const std::string& address, int fd) {
    uv_stream_t* s = closing_ || accept_cb_ == nullptr ? nullptr : adopt(fd);
    if (s == nullptr) {
      ::close(fd);
      return;
    }
    accept_cb_(&t_, from, address.c_str(), s);
  }

 private:
  struct Connecting {
    struct raft_uv_connect* req;
    raft_uv_connect_cb cb;
  };

  static MemoryEndpoint* of(struct raft_uv_transport* t) { return static_cast<MemoryEndpoint*>(t->impl); }

  uv_stream_t* adopt(int fd) {
    auto* pipe = static_cast<uv_pipe_t*>(raft_malloc(sizeof(uv_pipe_t)));
    if (pipe == nullptr) return nullptr;
    uv_pipe_init(loop_, pipe, 0);
    if (uv_pipe_open(pipe, fd) != 0) {
      uv_close(reinterpret_cast<uv_handle_t*>(pipe), [](uv_handle_t* h) { raft_free(h); });
      return nullptr;
    }
    return reinterpret_cast<uv_stream_t*>(pipe);
  }

  void connected(uint64_t key, int fd, int status) {
    auto it = connecting_.find(key);
    if (it == connecting_.end()) {
      if (fd >= 0) ::close(fd);
      return;
    }
    Connecting c = it->second;
    connecting_.erase(it);
    if (closing_) status = RAFT_CANCELED;
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
      std::lock_guard<std::mutex> lock(mu_);
      now.swap(tasks_);
      if (closing_) open_ = false;
    }
    for (auto& fn : now) fn();
    if (!closing_) return;
    auto pending = std::move(connecting_);
    connecting_.clear();
    for (auto& kv : pending) kv.second.cb(kv.second.req, nullptr, RAFT_CANCELED);
    if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&async_))) {
      uv_close(reinterpret_cast<uv_handle_t*>(&async_), [](uv_handle_t* h) {
        auto* self = static_cast<MemoryEndpoint*>(h->data);
        if (self->close_cb_) self->close_cb_(&self->t_);
      });
    }
  }

  static int on_init(struct raft_uv_transport* t, raft_id id, const char* address);
  static int on_listen(struct raft_uv_transport* t, raft_uv_accept_cb cb) {
    MemoryEndpoint* self = of(t);
    self->accept_cb_ = cb;
    std::lock_guard<std::mutex> lock(self->mu_);
    self->listening_ = true;
    return 0;
  }
  static int on_connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id id, const char* address,
                        raft_uv_connect_cb cb);
  static void on_close(struct raft_uv_transport* t, raft_uv_transport_close_cb cb);

  uv_loop_t* loop_;
  std::weak_ptr<MemoryNetwork> net_;
  struct raft_uv_transport t_ {};
  uv_async_t async_{};
  uint64_t id_ = 0;
  std::string address_;

  std::mutex mu_;  // guards open_, listening_, tasks_
  bool open_ = false;
  bool listening_ = false;
  std::vector<std::function<void()>> tasks_;

  // Consensus thread only.
  raft_uv_accept_cb accept_cb_ = nullptr;
  raft_uv_transport_close_cb close_cb_ = nullptr;
  bool closing_ = false;
  std::map<uint64_t, Connecting> connecting_;
  uint64_t next_key_ = 1;
};

class MemoryNetwork : public std::enable_shared_from_this<MemoryNetwork> {
 public:
  // A hook a test puts on a member's log appends (a "bad build"): it may
  // rewrite an entry's bytes in place before they are stored and sent.
  using AppendHook = std::function<void(struct raft_buffer* buf)>;

  ~MemoryNetwork() {
    cut_where([](uint64_t, uint64_t) { return true; });
    std::unique_lock<std::mutex> lock(mu_);
    relays_done_.wait(lock, [&] { return relays_ == 0; });
  }

  // Messages from `from` to `to` are lost until unblocked (one direction).
  void block(uint64_t from, uint64_t to) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocked_.insert({from, to});
    }
    cut_where([from, to](uint64_t f, uint64_t t) { return f == from && t == to; });
  }
  // `id` hears no one and no one hears it.
  void isolate(uint64_t id, const std::vector<uint64_t>& others) {
    for (uint64_t o : others) {
      if (o == id) continue;
      block(id, o);
      block(o, id);
    }
  }
  void heal() {
    std::lock_guard<std::mutex> lock(mu_);
    blocked_.clear();
  }
  bool blocked(uint64_t from, uint64_t to) {
    std::lock_guard<std::mutex> lock(mu_);
    return blocked_.count({from, to}) > 0;
  }

  void set_append_hook(uint64_t id, AppendHook hook) {
    std::lock_guard<std::mutex> lock(mu_);
    if (hook) {
      hooks_[id] = std::move(hook);
    } else {
      hooks_.erase(id);
    }
  }
  AppendHook append_hook(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = hooks_.find(id);
    return it == hooks_.end() ? AppendHook() : it->second;
  }

  // NodeOptions::io for member `id`: raft_uv with this network.
  raft::IoFactory io_factory(uint64_t id);

  void add(const std::shared_ptr<MemoryEndpoint>& e) {
    std::lock_guard<std::mutex> lock(mu_);
    endpoints_[e->id()] = e;
  }
  void remove(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      endpoints_.erase(id);
    }
    cut_where([id](uint64_t f, uint64_t t) { return f == id || t == id; });
  }

  // Opens a connection from `from` to `to`; the write end for `from`, or -1
  // (blocked, or `to` is not listening). Called on `from`'s consensus thread.
  int connect(uint64_t from, const std::string& from_address, uint64_t to) {
    std::shared_ptr<MemoryEndpoint> target;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (blocked_.count({from, to})) return -1;
      auto it = endpoints_.find(to);
      if (it == endpoints_.end()) return -1;
      target = it->second.lock();
    }
    if (!target || !target->listening()) return -1;
    int a[2], b[2];
    if (::pipe2(a, O_CLOEXEC) != 0) return -1;
    if (::pipe2(b, O_CLOEXEC) != 0) {
      ::close(a[0]);
      ::close(a[1]);
      return -1;
    }
    int receiver_end = b[0];
    auto accept = [target, from, from_address, receiver_end] { target->accept(from, from_address, receiver_end); };
    if (!target->post(accept)) {
      for (int fd : {a[0], a[1], b[0], b[1]}) ::close(fd);
      return -1;
    }
    auto relay = std::make_shared<Relay>();
    relay->from = from;
    relay->to = to;
    relay->in = a[0];
    relay->out = b[1];
    relay->cancel = ::eventfd(0, EFD_CLOEXEC);
    {
      std::lock_guard<std::mutex> lock(mu_);
      relays_list_.push_back(relay);
      ++relays_;
    }
    // Raw `this`: the destructor waits for every relay to end.
    std::thread([this, relay] { pump(*relay); }).detach();
    return a[1];
  }

 private:
  struct Relay {
    uint64_t from = 0, to = 0;
    int in = -1, out = -1, cancel = -1;
  };

  // Copies bytes from `in` to `out` until either end breaks or it is cut.
  void pump(Relay& r) {
    ::fcntl(r.out, F_SETFL, ::fcntl(r.out, F_GETFL) | O_NONBLOCK);
    std::string buf(64 << 10, '\0');
    for (bool live = true; live;) {
      struct pollfd p[2] = {{r.in, POLLIN, 0}, {r.cancel, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (p[1].revents != 0) break;
      ssize_t n = ::read(r.in, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      const char* at = buf.data();
      size_t left = static_cast<size_t>(n);
      while (left > 0) {
        ssize_t w = ::write(r.out, at, left);
        if (w > 0) {
          at += w;
          left -= static_cast<size_t>(w);
          continue;
        }
        if (w < 0 && (errno == EINTR)) continue;
        if (w < 0 && errno == EAGAIN) {
          struct pollfd q[2] = {{r.out, POLLOUT, 0}, {r.cancel, POLLIN, 0}};
          if (::poll(q, 2, -1) < 0 && errno != EINTR) {
            live = false;
            break;
          }
          if (q[1].revents != 0) {
            live = false;
            break;
          }
          continue;
        }
        live = false;  // the receiver closed its end
        break;
      }
    }
    // Closing both relay ends breaks the stream for sender and receiver.
    ::close(r.in);
    ::close(r.out);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = relays_list_.begin(); it != relays_list_.end(); ++it) {
      if (it->get() == &r) {
        ::close(r.cancel);
        relays_list_.erase(it);
        break;
      }
    }
    --relays_;
    relays_done_.notify_all();
  }

  void cut_where(const std::function<bool(uint64_t, uint64_t)>& match) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& r : relays_list_) {
      if (!match(r->from, r->to)) continue;
      uint64_t one = 1;
      (void)!::write(r->cancel, &one, sizeof one);
    }
  }

  std::mutex mu_;
  std::set<std::pair<uint64_t, uint64_t>> blocked_;
  std::map<uint64_t, std::weak_ptr<MemoryEndpoint>> endpoints_;
  std::map<uint64_t, AppendHook> hooks_;
  std::vector<std::shared_ptr<Relay>> relays_list_;
  int relays_ = 0;
  std::condition_variable relays_done_;
};

inline int MemoryEndpoint::on_init(struct raft_uv_transport* t, raft_id id, const char* address) {
  MemoryEndpoint* self = of(t);
  self->id_ = id;
  self->address_ = address;
  auto drain = [](uv_async_t* a) { static_cast<MemoryEndpoint*>(a->data)->drain(); };
  if (uv_async_init(self->loop_, &self->async_, drain) != 0) {
    return RAFT_IOERR;
  }
  self->async_.data = self;
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->open_ = true;
  }
  if (auto net = self->net_.lock()) net->add(self->shared_from_this());
  return 0;
}

inline int MemoryEndpoint::on_connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id id,
                                      const char*, raft_uv_connect_cb cb) {
  MemoryEndpoint* self = of(t);
  if (self->closing_) return RAFT_CANCELED;
  uint64_t key = self->next_key_++;
  self->connecting_[key] = Connecting{req, cb};
  int fd = -1;
  if (auto net = self->net_.lock()) fd = net->connect(self->id_, self->address_, id);
  // libraft expects the callback later, from the loop, as after a real connect.
  std::weak_ptr<MemoryEndpoint> weak = self->shared_from_this();
  if (!self->post([weak, key, fd] {
        if (auto s = weak.lock()) s->connected(key, fd, fd >= 0 ? 0 : RAFT_NOCONNECTION);
      })) {
    if (fd >= 0) ::close(fd);
  }
  return 0;
}

inline void MemoryEndpoint::on_close(struct raft_uv_transport* t, raft_uv_transport_close_cb cb) {
  MemoryEndpoint* self = of(t);
  self->closing_ = true;
  self->close_cb_ = cb;
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->listening_ = false;
  }
  if (auto net = self->net_.lock()) net->remove(self->id_);
  uv_async_send(&self->async_);
}

// raft_uv over a MemoryEndpoint, with the network's append hook for this
// member wrapped around libraft's log appends.
class MemoryIo final : public raft::RaftIo {
 public:
  MemoryIo(uv_loop_t* loop, std::shared_ptr<MemoryNetwork> net, uint64_t id)
      : net_(std::move(net)), id_(id), endpoint_(std::make_shared<MemoryEndpoint>(loop, net_)),
        uv_(loop, endpoint_->raw()) {}
  Error open(const std::string& dir) override {
    if (Error e = uv_.open(dir)) return e;
    // Reconnects after a cut come quickly (libraft's default is 1 s).
    raft_uv_set_connect_retry_delay(uv_.get(), 50);
    append_ = uv_.get()->append;
    uv_.get()->append = append_hook;
    std::lock_guard<std::mutex> lock(registry_mu());
    registry()[uv_.get()] = this;
    return {};
  }
  struct raft_io* get() override { return uv_.get(); }
  void close() override {
    {
      std::lock_guard<std::mutex> lock(registry_mu());
      registry().erase(uv_.get());
    }
    uv_.close();
  }

 private:
  using AppendFn = int (*)(struct raft_io*, struct raft_io_append*, const struct raft_entry[], unsigned,
                           raft_io_append_cb);
  // raft_io's callbacks get the raft_io only; the consensus threads of
  // several members look theirs up here.
  static std::map<struct raft_io*, MemoryIo*>& registry() {
    static std::map<struct raft_io*, MemoryIo*> r;
    return r;
  }
  static int append_hook(struct raft_io* io, struct raft_io_append* req, const struct raft_entry entries[],
                         unsigned n, raft_io_append_cb cb) {
    MemoryIo* self = registry_lookup(io);
    if (auto hook = self->net_->append_hook(self->id_)) {
      // The entries' buffers are libraft's in-memory log, which it also
      // sends to followers: rewriting them here is a leader that built a
      // bad entry itself.
      for (unsigned i = 0; i < n; ++i) {
        if (entries[i].type == RAFT_COMMAND) hook(const_cast<struct raft_buffer*>(&entries[i].buf));
      }
    }
    return self->append_(io, req, entries, n, cb);
  }
  static MemoryIo* registry_lookup(struct raft_io* io) {
    std::lock_guard<std::mutex> lock(registry_mu());
    return registry()[io];
  }
  static std::mutex& registry_mu() {
    static std::mutex mu;
    return mu;
  }

  std::shared_ptr<MemoryNetwork> net_;
  uint64_t id_;
  std::shared_ptr<MemoryEndpoint> endpoint_;
  raft::UvIo uv_;
  AppendFn append_ = nullptr;
};

inline raft::IoFactory MemoryNetwork::io_factory(uint64_t id) {
  std::weak_ptr<MemoryNetwork> weak = shared_from_this();
  return [weak, id](uv_loop_t* loop, std::shared_ptr<raft::Forwarder>) -> std::unique_ptr<raft::RaftIo> {
    return std::make_unique<MemoryIo>(loop, weak.lock(), id);
  };
}

}  // namespace etcdq::testing
