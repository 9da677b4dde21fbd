// An in-process network for consensus::Node (test double, header-only): the
// test decides which member hears which, without a socket or a port.
//
// Why raft_uv with an in-memory transport rather than libraft's fixture
// (raft/fixture.h, whose stub I/O apply_cluster_test.cc uses): the fixture
// steps one libraft instance by hand and cannot run consensus::Node, whose roles
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
// Thread-safety: every public method of MemoryNetwork may be called from
// any thread.
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

#include "consensus/io.h"
#include "consensus/uv_bridge.h"

namespace etcdq::testing {

class MemoryNetwork;

// One member's raft_uv_transport: connections come from the network
// (consensus::UvBridge says which of its methods run on which thread).
class MemoryEndpoint : public consensus::UvBridge, public std::enable_shared_from_this<MemoryEndpoint> {
 public:
  MemoryEndpoint(uv_loop_t* loop, std::weak_ptr<MemoryNetwork> net) : UvBridge(loop), net_(std::move(net)) {}

 private:
  void after_init() override;
  void start_connect(uint64_t key, raft_id to, const char* address) override;
  void before_close() override;

  std::weak_ptr<MemoryNetwork> net_;
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
  consensus::IoFactory io_factory(uint64_t id);

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

inline void MemoryEndpoint::after_init() {
  if (auto net = net_.lock()) net->add(shared_from_this());
}

inline void MemoryEndpoint::start_connect(uint64_t key, raft_id to, const char*) {
  int fd = -1;
  if (auto net = net_.lock()) fd = net->connect(id(), address(), to);
  // libraft expects the callback later, from the loop, as after a real connect.
  std::weak_ptr<MemoryEndpoint> weak = shared_from_this();
  if (!post([weak, key, fd] {
        if (auto s = weak.lock()) s->connected(key, fd, fd >= 0 ? 0 : RAFT_NOCONNECTION);
      })) {
    if (fd >= 0) ::close(fd);
  }
}

inline void MemoryEndpoint::before_close() {
  if (auto net = net_.lock()) net->remove(id());
}

// raft_uv over a MemoryEndpoint, with the network's append hook for this
// member wrapped around libraft's log appends.
class MemoryIo final : public consensus::RaftIo {
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
  consensus::UvIo uv_;
  AppendFn append_ = nullptr;
};

inline consensus::IoFactory MemoryNetwork::io_factory(uint64_t id) {
  std::weak_ptr<MemoryNetwork> weak = shared_from_this();
  return [weak, id](uv_loop_t* loop, std::shared_ptr<consensus::Forwarder>) -> std::unique_ptr<consensus::RaftIo> {
    return std::make_unique<MemoryIo>(loop, weak.lock(), id);
  };
}

}  // namespace etcdq::testing
