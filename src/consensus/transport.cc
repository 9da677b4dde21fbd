#include "consensus/transport.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "consensus/inbound.h"
#include "consensus/metrics.h"
#include "consensus/uv_bridge.h"

namespace etcdq::consensus {
namespace {

// How often deadlines (hellos, connects) are looked at.
constexpr uint64_t kSweepMs = 100;
// One read from a peer's socket (shared by every incoming connection: the
// bytes are checked and written on before the next read).
constexpr size_t kReadBytes = 256 << 10;

void put_le64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// "host:port" or "[v6]:port" -> host, port; false if there is no port.
bool split_host_port(const std::string& address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  return !host->empty();
}

}  // namespace

std::string PeerTransport::hello(raft_id id, const std::string& address) {
  std::string out(kMagic);
  put_le64(&out, kVersion);
  put_le64(&out, id);
  size_t padded = (address.size() + 1 + 7) / 8 * 8;  // at least one NUL
  put_le64(&out, padded);
  out += address;
  out.append(padded - address.size(), '\0');
  return out;
}

struct PeerTransport::Shared : UvBridge, Inbound::Host, std::enable_shared_from_this<PeerTransport::Shared> {
  // One outgoing connection until libraft has it (or it failed). Freed once
  // no libuv request of its own is outstanding.
  struct Outgoing {
    Shared* t;
    uint64_t key;
    raft_id to;
    std::string host;  // as dialed (TLS checks the certificate against it)
    uint64_t deadline_ms;
    std::string hello;
    uv_tcp_t* tcp = nullptr;  // raft_malloc'd: libraft frees it once it is libraft's
    uv_getaddrinfo_t gai{};
    uv_connect_t connect{};
    uv_write_t write{};
    int requests = 0;  // libuv requests whose callback has not run
    bool resolving = false;
    bool done = false;
  };

  Shared(uv_loop_t* loop, Options opts) : UvBridge(loop), loop(loop), opts(opts) {}

  uv_loop_t* loop;
  Options opts;
  std::function<bool(raft_id)> accepts;  // set_sender_filter; loop thread
  uv_timer_t sweep{};
  bool sweep_open = false;
  std::map<uint64_t, Outgoing*> outgoing;
  std::unordered_set<Inbound*> incoming;
  // Accepted incoming connections by sender (etcd_network_active_peers).
  std::unordered_map<raft_id, int> active_from;
  std::atomic<size_t> incoming_count{0};
  std::unique_ptr<char[]> read_buf;

  // ---- outgoing -------------------------------------------------------------

  void start_connect(uint64_t key, raft_id to, const char* address) override {
    auto* o = new Outgoing{this, key, to, "", uv_now(loop) + static_cast<uint64_t>(opts.connect_timeout.count()),
                           hello(id(), UvBridge::address())};
    outgoing[key] = o;
    arm_sweep();
    std::string host, port;
    if (!split_host_port(address, &host, &port)) {
      // Not from inside libraft's connect call: the answer comes from the loop.
      fail_later(o, RAFT_NOCONNECTION);
      return;
    }
    o->host = host;
    sockaddr_storage sa{};
    int p = std::atoi(port.c_str());
    if (uv_ip4_addr(host.c_str(), p, reinterpret_cast<sockaddr_in*>(&sa)) == 0 ||
        uv_ip6_addr(host.c_str(), p, reinterpret_cast<sockaddr_in6*>(&sa)) == 0) {
      dial(o, reinterpret_cast<sockaddr*>(&sa));
      if (!o->done && o->tcp == nullptr) fail_later(o, RAFT_NOCONNECTION);
      return;
    }
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    o->gai.data = o;
    ++o->requests;
    o->resolving = true;
    if (uv_getaddrinfo(loop, &o->gai, resolved, host.c_str(), port.c_str(), &hints) != 0) {
      --o->requests;
      o->resolving = false;
      fail_later(o, RAFT_NOCONNECTION);
    }
  }

  static void resolved(uv_getaddrinfo_t* req, int status, addrinfo* res) {
    auto* o = static_cast<Outgoing*>(req->data);
    --o->requests;
    o->resolving = false;
    if (!o->done) {
      if (status != 0 || res == nullptr) {
        o->t->fail(o, RAFT_NOCONNECTION);
      } else {
        o->t->dial(o, res->ai_addr);
        if (!o->done && o->tcp == nullptr) o->t->fail(o, RAFT_NOCONNECTION);
      }
    }
    if (res != nullptr) uv_freeaddrinfo(res);
    maybe_free(o);
  }

  // Starts the TCP connect; o->tcp stays null if it could not start.
  void dial(Outgoing* o, const sockaddr* addr) {
    auto* tcp = static_cast<uv_tcp_t*>(raft_malloc(sizeof(uv_tcp_t)));
    if (tcp == nullptr) return;
    uv_tcp_init(loop, tcp);
    o->connect.data = o;
    ++o->requests;
    if (uv_tcp_connect(&o->connect, tcp, addr, connected_tcp) != 0) {
      --o->requests;
      uv_close(reinterpret_cast<uv_handle_t*>(tcp), [](uv_handle_t* h) { raft_free(h); });
      return;
    }
    o->tcp = tcp;
  }

  static void connected_tcp(uv_connect_t* req, int status) {
    auto* o = static_cast<Outgoing*>(req->data);
    --o->requests;
    if (!o->done) {
      if (status != 0) {
        o->t->fail(o, RAFT_NOCONNECTION);
      } else if (o->t->opts.tls_dial) {
        o->t->hand_to_tls(o);
      } else {
        uv_tcp_nodelay(o->tcp, 1);
        uv_buf_t b = uv_buf_init(o->hello.data(), static_cast<unsigned>(o->hello.size()));
        o->write.data = o;
        ++o->requests;
        if (uv_write(&o->write, reinterpret_cast<uv_stream_t*>(o->tcp), &b, 1, wrote_hello) != 0) {
          --o->requests;
          o->t->fail(o, RAFT_NOCONNECTION);
        }
      }
    }
    maybe_free(o);
  }

  static void wrote_hello(uv_write_t* req, int status) {
    auto* o = static_cast<Outgoing*>(req->data);
    --o->requests;
    if (!o->done) {
      if (status != 0) {
        o->t->fail(o, RAFT_NOCONNECTION);
      } else {
        // libraft writes its messages straight to the socket from here on.
        auto* stream = reinterpret_cast<uv_stream_t*>(o->tcp);
        o->tcp = nullptr;
        o->done = true;
        o->t->outgoing.erase(o->key);
        o->t->connected(o->key, stream, 0);
      }
    }
    maybe_free(o);
  }

  // Peer TLS: the connected socket goes to the TLS pump, libraft gets a
  // socketpair whose first bytes (the hello) go out inside TLS.
  void hand_to_tls(Outgoing* o) {
    uv_os_fd_t fd = -1;
    int tcp = -1;
    int sv[2] = {-1, -1};
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(o->tcp), &fd) != 0 ||
        (tcp = ::fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0 ||
        ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
      if (tcp >= 0) ::close(tcp);
      fail(o, RAFT_NOCONNECTION);
      return;
    }
    int one = 1;
    ::setsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // The dup keeps the socket open once libuv's handle is closed.
    uv_close(reinterpret_cast<uv_handle_t*>(o->tcp), [](uv_handle_t* h) { raft_free(h); });
    o->tcp = nullptr;
    // A fresh socketpair takes the hello (at most 552 bytes) at once.
    if (::send(sv[1], o->hello.data(), o->hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(o->hello.size())) {
      ::close(tcp);
      ::close(sv[0]);
      ::close(sv[1]);
      fail(o, RAFT_NOCONNECTION);
      return;
    }
    opts.tls_dial(tcp, sv[0], o->host);
    o->done = true;
    outgoing.erase(o->key);
    connected(o->key, sv[1], 0);
  }

  // Ends an attempt: closes what it opened; answers libraft with `status`
  // unless `answer` is false (the bridge answers RAFT_CANCELED on close).
  void fail(Outgoing* o, int status, bool answer = true) {
    if (o->done) return;
    o->done = true;
    if (status == RAFT_NOCONNECTION) peer_sent_failures(o->to).Increment();
    outgoing.erase(o->key);
    if (o->tcp != nullptr) {
      // Pending connect and write callbacks run with UV_ECANCELED.
      uv_close(reinterpret_cast<uv_handle_t*>(o->tcp), [](uv_handle_t* h) { raft_free(h); });
      o->tcp = nullptr;
    }
    if (o->resolving) uv_cancel(reinterpret_cast<uv_req_t*>(&o->gai));
    if (answer) connected(o->key, static_cast<uv_stream_t*>(nullptr), status);
  }

  void fail_later(Outgoing* o, int status) {
    o->done = true;
    if (status == RAFT_NOCONNECTION) peer_sent_failures(o->to).Increment();
    outgoing.erase(o->key);
    uint64_t key = o->key;
    maybe_free(o);
    post([self = shared_from_this(), key, status] { self->connected(key, static_cast<uv_stream_t*>(nullptr), status); });
  }

  static void maybe_free(Outgoing* o) {
    if (o->done && o->requests == 0) delete o;
  }

  // ---- incoming -------------------------------------------------------------

  void start_incoming(int fd) {
    if (closing() || !listening()) {
      ::close(fd);
      return;
    }
    if (incoming.size() >= kMaxIncoming) {
      // The one idle longest goes: a member's live connection is never it
      // for long, and libraft reconnects when it next has something to send.
      Inbound* idle = nullptr;
      for (Inbound* in : incoming) {
        if (idle == nullptr || in->active_ms() < idle->active_ms()) idle = in;
      }
      incoming.erase(idle);
      idle->close("too many incoming Raft connections: closed the one idle longest");
    }
    Inbound* in = Inbound::start(loop, this, fd);
    if (in == nullptr) return;
    incoming.insert(in);
    incoming_count = incoming.size();
    arm_sweep();
  }

  bool hand_to_libraft(raft_id from, const std::string& address, int fd) override {
    if (accepts && !accepts(from)) {
      warn_peer_connection(
          fmt::format("refused a Raft connection from {:x} ({}): not in this member's configuration", from, address));
      ::close(fd);
      return false;
    }
    if (active_from[from]++ == 0) peer_active(id(), from).Set(1);
    accept(from, address, fd);
    return true;
  }

  void gone(Inbound* in) override {
    incoming.erase(in);
    incoming_count = incoming.size();
    // etcd's peer status: active while a stream from the member is up;
    // its going down is one disconnection (rafthttp peer_status.go).
    if (raft_id from = in->accepted_from(); from != 0) {
      auto it = active_from.find(from);
      if (it != active_from.end() && --it->second == 0) {
        active_from.erase(it);
        peer_active(id(), from).Set(0);
        peer_disconnected(id(), from).Increment();
      }
    }
  }

  uv_buf_t read_buffer() override {
    if (!read_buf) read_buf.reset(new char[kReadBytes]);
    return uv_buf_init(read_buf.get(), kReadBytes);
  }

  // ---- deadlines and closing ------------------------------------------------

  void after_init() override {
    uv_timer_init(loop, &sweep);
    sweep.data = this;
    // Never what keeps the loop running.
    uv_unref(reinterpret_cast<uv_handle_t*>(&sweep));
    sweep_open = true;
  }

  void arm_sweep() {
    if (!sweep_open || uv_is_active(reinterpret_cast<uv_handle_t*>(&sweep))) return;
    uv_timer_start(&sweep, [](uv_timer_t* t) { static_cast<Shared*>(t->data)->on_sweep(); }, kSweepMs, kSweepMs);
  }

  void on_sweep() {
    uint64_t now = uv_now(loop);
    std::vector<Outgoing*> late;
    for (auto& [key, o] : outgoing) {
      if (now >= o->deadline_ms) late.push_back(o);
    }
    for (Outgoing* o : late) {
      fail(o, RAFT_NOCONNECTION);
      maybe_free(o);
    }
    bool waiting = false;
    std::vector<Inbound*> silent;
    for (Inbound* in : incoming) {
      if (!in->in_hello()) continue;
      if (now - in->started_ms() >= static_cast<uint64_t>(opts.handshake_timeout.count())) {
        silent.push_back(in);
      } else {
        waiting = true;
      }
    }
    for (Inbound* in : silent) {
      incoming.erase(in);
      in->close("closed a Raft connection that sent no hello within " +
                std::to_string(opts.handshake_timeout.count()) + " ms");
    }
    incoming_count = incoming.size();
    if (!waiting && outgoing.empty()) uv_timer_stop(&sweep);
  }

  void before_close() override {
    std::vector<Outgoing*> all;
    for (auto& [key, o] : outgoing) all.push_back(o);
    for (Outgoing* o : all) {
      fail(o, RAFT_CANCELED, /*answer=*/false);
      maybe_free(o);
    }
    std::vector<Inbound*> ins(incoming.begin(), incoming.end());
    incoming.clear();
    incoming_count = 0;
    for (Inbound* in : ins) in->close("");
    if (sweep_open) {
      sweep_open = false;
      uv_close(reinterpret_cast<uv_handle_t*>(&sweep), nullptr);
    }
  }
};

PeerTransport::PeerTransport(uv_loop_t* loop, Options opts) : shared_(std::make_shared<Shared>(loop, opts)) {}

PeerTransport::~PeerTransport() = default;

void PeerTransport::set_sender_filter(std::function<bool(raft_id)> accepts) { shared_->accepts = std::move(accepts); }

struct raft_uv_transport* PeerTransport::raw() { return shared_->raw(); }

void PeerTransport::adopt(int fd) {
  if (!shared_->post([self = shared_, fd] { self->start_incoming(fd); })) ::close(fd);
}

size_t PeerTransport::incoming() const { return shared_->incoming_count.load(); }

}  // namespace etcdq::consensus
