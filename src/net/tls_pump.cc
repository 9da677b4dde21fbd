#include "net/tls_pump.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/thread_name.h"
#include "net/h2_guard.h"
#include "net/mux.h"
#include "net/pump_inbound.h"
#include "common/socket_address.h"

namespace etcdq::net {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kWakeTag = 0;

// Process-wide (every pump): route fd -> (owner key, CN) of the live
// connection that handed that fd out.
std::mutex names_mu;
std::unordered_map<int, std::pair<uint64_t, std::string>> names;


std::string common_name_of(SSL* ssl) {
  X509* peer = SSL_get1_peer_certificate(ssl);
  if (!peer) return "";
  std::string cn;
  if (SSL_get_verify_result(ssl) == X509_V_OK) {
    X509_NAME* subject = X509_get_subject_name(peer);
    int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (i >= 0) {
      unsigned char* utf8 = nullptr;
      int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
      if (n > 0) cn.assign(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
      OPENSSL_free(utf8);
    }
  }
  X509_free(peer);
  return cn;
}

}  // namespace

struct TlsPump::Impl {
  struct Conn {
    uint64_t id = 0;
    int tcp = -1;
    int plain = -1;     // the pump's end of the socketpair
    int route_fd = -1;  // the end the route got (the key of `names`)
    SSL* ssl = nullptr;
    bool routed = false;
    bool dialed = false;  // client side (dial()); `plain` set from the start
    Clock::time_point since;
    std::list<uint64_t>::iterator waiting;  // in handshaking, until routed
    // TLS -> plain (an HTTP/2 client's through its guard), and plain ->
    // TLS; [out_off, out_len) is what is left to write.
    PumpInbound in{kBufferBytes};
    std::unique_ptr<char[]> out{new char[kBufferBytes]};
    size_t out_off = 0, out_len = 0;
    bool held = false;    // waiting in Worker::held for a reset token
    bool warned = false;  // its first hold was logged
    bool refusal_warned = false;  // its first refused stream was logged
    bool tls_eof = false, plain_eof = false, plain_shut = false;
  };

  struct Worker {
    Impl* owner = nullptr;
    int epoll = -1;
    int wake = -1;
    std::thread thread;
    std::mutex mu;  // guards incoming and dialing
    std::vector<int> incoming;
    struct Dial {
      int tcp, plain;
      std::string host;
    };
    std::vector<Dial> dialing;
    // Everything below: the worker thread only.
    std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
    std::list<uint64_t> handshaking;  // oldest first
    std::vector<uint64_t> ready;      // stopped after kBurst steps with more to do
    // Connections whose guard (net/h2_guard.h) holds what they sent.
    std::multimap<Clock::time_point, uint64_t> held;
    uint64_t next_id = 1;
    Clock::time_point log_second{};
    int logs_this_second = 0;

    ~Worker() {
      for (int fd : incoming) ::close(fd);
      for (const Dial& d : dialing) {
        ::close(d.tcp);
        ::close(d.plain);
      }
      if (wake >= 0) ::close(wake);
      if (epoll >= 0) ::close(epoll);
    }

    void close_conn(Conn& c) {
      if (c.ssl) SSL_free(c.ssl);
      if (c.tcp >= 0) ::close(c.tcp);
      if (c.plain >= 0) ::close(c.plain);
      if (!c.routed) handshaking.erase(c.waiting);
      if (c.route_fd >= 0) owner->forget_name(c.route_fd, owner_key(c.id));
      conns.erase(c.id);  // c is gone
    }

    uint64_t owner_key(uint64_t id) const { return (reinterpret_cast<uintptr_t>(this) << 16) ^ id; }

    // At most kRejectLogsPerSecond warnings a second, per thread.
    bool may_log() {
      auto now = Clock::now();
      if (now - log_second >= std::chrono::seconds(1)) {
        log_second = now;
        logs_this_second = 0;
      }
      return ++logs_this_second <= kRejectLogsPerSecond;
    }

    void reject(Conn& c, const std::string& why) {
      if (!may_log()) return;
      if (c.dialed) {
        spdlog::warn("TLS to the {} at {} failed: {}", owner->role, common::remote_address(c.tcp), why);
      } else {
        spdlog::warn("rejected connection on {} URL from {}: {}", owner->role, common::remote_address(c.tcp), why);
      }
    }

    std::string handshake_error(Conn& c, int err) {
      long verify = SSL_get_verify_result(c.ssl);
      if (verify != X509_V_OK) {
        return std::string(c.dialed ? "tls: failed to verify certificate: " : "tls: failed to verify client certificate: ") +
               X509_verify_cert_error_string(verify);
      }
      unsigned long e = ERR_peek_error();
      // etcd's (Go's) words for the common case.
      if (ERR_GET_REASON(e) == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) return "tls: client didn't provide a certificate";
      if (e != 0) {
        char buf[256];
        ERR_error_string_n(e, buf, sizeof(buf));
        return buf;
      }
      if (err == SSL_ERROR_SYSCALL) return errno ? std::strerror(errno) : "EOF";
      return "TLS handshake failed";
    }

    void add(int fd) {
      SSL_CTX* ctx = owner->context->current();
      SSL* ssl = SSL_new(ctx);
      SSL_CTX_free(ctx);
      if (!ssl) {
        ::close(fd);
        return;
      }
      auto conn = std::make_unique<Conn>();
      Conn& c = *conn;
      c.id = next_id++;
      c.tcp = fd;
      c.ssl = ssl;
      c.since = Clock::now();
      SSL_set_fd(ssl, fd);
      SSL_set_accept_state(ssl);
      start_handshake(std::move(conn));
    }

    void add_dialed(const Dial& d) {
      SSL_CTX* ctx = owner->context->current_client();
      SSL* ssl = ctx ? SSL_new(ctx) : nullptr;
      if (ctx) SSL_CTX_free(ctx);
      if (!ssl) {
        ::close(d.tcp);
        ::close(d.plain);
        return;
      }
      auto conn = std::make_unique<Conn>();
      Conn& c = *conn;
      c.id = next_id++;
      c.tcp = d.tcp;
      c.plain = d.plain;
      c.ssl = ssl;
      c.dialed = true;
      c.since = Clock::now();
      SSL_set_fd(ssl, d.tcp);
      SSL_set_connect_state(ssl);
      if (!owner->context->options().skip_verify) {
        // Go's crypto/tls checks the dialed host (ServerName from the URL).
        unsigned char buf[16];
        bool ip = inet_pton(AF_INET, d.host.c_str(), buf) == 1 || inet_pton(AF_INET6, d.host.c_str(), buf) == 1;
        X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
        if (ip) {
          X509_VERIFY_PARAM_set1_ip_asc(param, d.host.c_str());
        } else {
          X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
          X509_VERIFY_PARAM_set1_host(param, d.host.c_str(), d.host.size());
          SSL_set_tlsext_host_name(ssl, d.host.c_str());
        }
      }
      start_handshake(std::move(conn));
    }

    // Reads from the TLS side: bytes read, 0 at its end, kWouldBlock, or
    // kFailed.
    static constexpr ssize_t kWouldBlock = -1, kFailed = -2;
    static ssize_t wire_read(Conn& c, char* buf, size_t n) {
      ERR_clear_error();
      int r = SSL_read(c.ssl, buf, static_cast<int>(n));
      if (r > 0) return r;
      int err = SSL_get_error(c.ssl, r);
      if (err == SSL_ERROR_ZERO_RETURN) return 0;
      return err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ? kWouldBlock : kFailed;
    }
    static ssize_t wire_write(Conn& c, const char* buf, size_t n) {
      ERR_clear_error();
      int w = SSL_write(c.ssl, buf, static_cast<int>(n));
      if (w > 0) return w;
      int err = SSL_get_error(c.ssl, w);
      return err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ? kWouldBlock : kFailed;
    }

    // The guard holds the rest of c.in until `when`.
    void hold(Conn& c, Clock::time_point when) {
      if (!c.warned) {
        c.warned = true;
        warn(c, std::string("held: ") + c.in.guard()->why() + "; reading it only as fast as the guard allows");
      }
      if (c.held) return;
      c.held = true;
      held.emplace(when, c.id);
    }

    void warn(Conn& c, const std::string& what) {
      if (!may_log()) return;
      spdlog::warn("{} connection from {}: {}", owner->role, common::remote_address(c.tcp), what);
    }

    // The handshake is done and `c.plain` is set: watch it beside the TLS
    // socket. False (the connection closed) when epoll refuses it.
    bool start_routing(Conn& c) {
      c.routed = true;
      handshaking.erase(c.waiting);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.u64 = c.id;
      if (epoll_ctl(epoll, EPOLL_CTL_ADD, c.plain, &ev) != 0) {
        close_conn(c);
        return false;
      }
      return true;
    }

    // Registers a new connection (its SSL set up) and takes its first
    // handshake step; the oldest handshake goes when there are too many.
    void start_handshake(std::unique_ptr<Conn> conn) {
      Conn& c = *conn;
      handshaking.push_back(c.id);
      c.waiting = std::prev(handshaking.end());
      conns.emplace(c.id, std::move(conn));
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.u64 = c.id;
      if (epoll_ctl(epoll, EPOLL_CTL_ADD, c.tcp, &ev) != 0) {
        close_conn(c);
        return;
      }
      if (handshaking.size() > kMaxHandshaking) {
        uint64_t oldest = handshaking.front();
        close_conn(*conns.at(oldest));
        if (oldest == c.id) return;
      }
      step(c);
    }

    // The first plaintext bytes: HTTP/2 (gRPC), a prefixed route's magic,
    // or HTTP/1.1, as on a plain port (mux.h's pick_route). Null route
    // while more is needed.
    const Route* classify(const Conn& c, bool* need_more) const {
      std::string_view first = c.in.first();
      size_t which = 0;
      Picked picked = pick_route(first.data(), first.size(), owner->routes.prefixed, &which);
      *need_more = picked == Picked::kNeedMore;
      switch (picked) {
        case Picked::kNeedMore: return nullptr;
        case Picked::kPrefixed: return &owner->routes.prefixed[which].route;
        case Picked::kHttp2: return &owner->routes.http2;
        case Picked::kHttp1: break;
      }
      return &owner->routes.http1;
    }

    // Handshake, then route on the first plaintext bytes, then pump.
    void step(Conn& c) {
      if (!c.routed) {
        ERR_clear_error();
        int r = SSL_do_handshake(c.ssl);
        if (r != 1) {
          int err = SSL_get_error(c.ssl, r);
          if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return;
          reject(c, handshake_error(c, err));
          close_conn(c);
          return;
        }
        std::string refused = owner->context->check_identity(c.ssl);
        if (!refused.empty()) {
          reject(c, refused);
          close_conn(c);
          return;
        }
        if (c.dialed) {
          if (!start_routing(c)) return;
          pump(c);
          return;
        }
        const Route* picked = nullptr;
        for (;;) {
          bool need_more = false;
          picked = classify(c, &need_more);
          if (!need_more) break;
          ssize_t n = wire_read(c, c.in.first_space(), c.in.first_room());
          if (n == kWouldBlock) return;
          if (n <= 0) {
            close_conn(c);
            return;
          }
          c.in.got_first(static_cast<size_t>(n));
        }
        const Route& route = *picked;
        // What an HTTP/2 client sends is checked from its preface on.
        c.in.routed(picked == &owner->routes.http2 ? std::make_unique<H2Guard>(H2Guard::process_shared()) : nullptr);
        int sv[2];
        if (!route || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
          close_conn(c);
          return;
        }
        if (std::max(sv[0], sv[1]) >= Mux::connection_fd_ceiling()) {
          // A TLS connection holds three descriptors: its socketpair may
          // not take the ones kept for the member's own files either
          // (net/mux.h; the accept stopped only at the first).
          ::close(sv[0]);
          ::close(sv[1]);
          close_conn(c);
          return;
        }
        c.plain = sv[0];
        if (!start_routing(c)) {
          ::close(sv[1]);
          return;
        }
        c.route_fd = sv[1];
        owner->remember_name(sv[1], owner_key(c.id), common_name_of(c.ssl));
        {
          // After stop_routing() the servers may be gone.
          std::lock_guard<std::mutex> lock(owner->route_mu);
          if (owner->routing_stopped) {
            ::close(sv[1]);  // nobody took it
            close_conn(c);
            return;
          }
          route(sv[1]);
        }
      }
      pump(c);
    }

    // Copies both ways until both sides would block, a buffer waits on the
    // other side, or kBurst rounds passed (then it goes on the ready list).
    void pump(Conn& c) {
      for (int round = 0; round < kBurst; ++round) {
        bool progress = false;
        if (!c.tls_eof && c.in.empty()) {
          ssize_t n = wire_read(c, c.in.space(), c.in.capacity());
          if (n > 0) {
            c.in.got(static_cast<size_t>(n));
            progress = true;
          } else if (n == 0) {
            c.tls_eof = true;
            progress = true;
          } else if (n == kFailed) {
            close_conn(c);
            return;
          }
        }
        if (c.in.unchecked() && !c.held) {
          Clock::time_point resume;
          PumpInbound::Verdict v = c.in.check(Clock::now(), &resume);
          if (v == PumpInbound::Verdict::kRefused) {
            warn(c, std::string("closed: ") + c.in.guard()->why());
            close_conn(c);
            return;
          }
          if (v == PumpInbound::Verdict::kHeld) hold(c, resume);
        }
        if (std::string_view ready = c.in.sendable(); !ready.empty()) {
          ssize_t w = send(c.plain, ready.data(), ready.size(), MSG_NOSIGNAL);
          if (w > 0) {
            c.in.sent(static_cast<size_t>(w));
            progress = true;
          } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            close_conn(c);
            return;
          }
        }
        if (c.tls_eof && c.in.empty() && !c.plain_shut) {
          shutdown(c.plain, SHUT_WR);  // the server sees the client's end
          c.plain_shut = true;
        }
        // What the guard owes the client (refusals of streams past the
        // cap) goes out between the server's frames: everything received
        // from the server went out and ended with a whole frame. Whole
        // reply frames only, so the server's next bytes may follow.
        if (H2Guard* guard = c.in.guard(); guard && c.out_len == 0 && !guard->replies().empty() &&
                                           (guard->replies_mid_frame() || guard->server_between_frames())) {
          if (!c.refusal_warned) {
            c.refusal_warned = true;
            warn(c, "refusing new streams past " + std::to_string(H2Guard::kMaxConcurrentStreams) +
                        " open at once (RST_STREAM REFUSED_STREAM)");
          }
          std::string_view r = guard->replies();
          size_t k = std::min(r.size(), kBufferBytes);
          std::memcpy(c.out.get(), r.data(), k);
          guard->replies_sent(k);
          c.out_off = 0;
          c.out_len = k;
          progress = true;
        }
        if (!c.plain_eof && c.out_len == 0) {
          ssize_t r = recv(c.plain, c.out.get(), kBufferBytes, 0);
          if (r > 0) {
            c.out_off = 0;
            c.out_len = static_cast<size_t>(r);
            if (c.in.guard()) c.in.guard()->server_sent(c.out.get(), c.out_len, Clock::now());
            progress = true;
          } else if (r == 0) {
            c.plain_eof = true;
            progress = true;
          } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            close_conn(c);
            return;
          }
        }
        if (c.out_off < c.out_len) {
          ssize_t n = wire_write(c, c.out.get() + c.out_off, c.out_len - c.out_off);
          if (n > 0) {
            c.out_off += static_cast<size_t>(n);
            if (c.out_off == c.out_len) c.out_off = c.out_len = 0;
            progress = true;
          } else if (n == kFailed) {
            close_conn(c);
            return;
          }
        }
        // The server closed its end and everything it wrote went out.
        if (c.plain_eof && c.out_len == 0) {
          ERR_clear_error();
          SSL_shutdown(c.ssl);  // close_notify, best effort
          close_conn(c);
          return;
        }
        if (!progress) return;
      }
      ready.push_back(c.id);
    }

    void expire() {
      auto deadline = Clock::now() - kHandshakeTimeout;
      while (!handshaking.empty()) {
        Conn& c = *conns.at(handshaking.front());
        if (c.since >= deadline) break;
        reject(c, "TLS handshake timeout");
        close_conn(c);
      }
    }

    void loop() {
      epoll_event events[64];
      while (!owner->stop_requested.load()) {
        int timeout_ms = 1000;
        if (!ready.empty()) {
          timeout_ms = 0;
        } else if (!held.empty()) {
          auto wait = std::chrono::ceil<std::chrono::milliseconds>(held.begin()->first - Clock::now());
          timeout_ms = static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 1000));
        }
        int n = epoll_wait(epoll, events, 64, timeout_ms);
        if (n < 0 && errno != EINTR) {
          spdlog::error("{} TLS pump: epoll_wait failed: {}", owner->role, std::strerror(errno));
          return;
        }
        for (int i = 0; i < n; ++i) {
          uint64_t id = events[i].data.u64;
          if (id == kWakeTag) {
            uint64_t v;
            ssize_t ignored = read(wake, &v, sizeof(v));
            (void)ignored;
            std::vector<int> fds;
            {
              std::lock_guard<std::mutex> lock(mu);
              fds.swap(incoming);
            }
            std::vector<Dial> dials;
            {
              std::lock_guard<std::mutex> lock(mu);
              dials.swap(dialing);
            }
            for (int fd : fds) add(fd);
            for (const Dial& d : dials) add_dialed(d);
            continue;
          }
          auto it = conns.find(id);
          if (it != conns.end()) step(*it->second);
        }
        auto now = Clock::now();
        while (!held.empty() && held.begin()->first <= now) {
          uint64_t id = held.begin()->second;
          held.erase(held.begin());
          auto it = conns.find(id);
          if (it == conns.end()) continue;
          it->second->held = false;
          step(*it->second);
        }
        std::vector<uint64_t> again;
        again.swap(ready);
        for (uint64_t id : again) {
          auto it = conns.find(id);
          if (it != conns.end()) step(*it->second);
        }
        expire();
      }
      while (!conns.empty()) close_conn(*conns.begin()->second);
    }
  };

  std::shared_ptr<TlsContext> context;
  Routes routes;
  std::string role;
  std::vector<std::unique_ptr<Worker>> workers;
  std::atomic<bool> stop_requested{false};
  std::atomic<uint64_t> next_worker{0};
  std::mutex route_mu;  // held while a route runs
  bool routing_stopped = false;  // guarded by route_mu
  bool started = false;

  void remember_name(int fd, uint64_t key, std::string cn) {
    std::lock_guard<std::mutex> lock(names_mu);
    names[fd] = {key, std::move(cn)};
  }
  // Only the connection that set it: the fd number may already be reused.
  void forget_name(int fd, uint64_t key) {
    std::lock_guard<std::mutex> lock(names_mu);
    auto it = names.find(fd);
    if (it != names.end() && it->second.first == key) names.erase(it);
  }
};

TlsPump::TlsPump(std::shared_ptr<TlsContext> context, Routes routes, std::string role)
    : impl_(std::make_unique<Impl>()) {
  impl_->context = std::move(context);
  impl_->routes = std::move(routes);
  impl_->role = std::move(role);
}

TlsPump::~TlsPump() { stop(); }

Error TlsPump::start() {
  for (int i = 0; i < kThreads; ++i) {
    auto w = std::make_unique<Impl::Worker>();
    w->owner = impl_.get();
    w->epoll = epoll_create1(EPOLL_CLOEXEC);
    w->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->epoll < 0 || w->wake < 0) return {Code::kInternal, impl_->role + " TLS pump: " + std::strerror(errno)};
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeTag;
    epoll_ctl(w->epoll, EPOLL_CTL_ADD, w->wake, &ev);
    impl_->workers.push_back(std::move(w));
  }
  for (auto& w : impl_->workers) {
    Impl::Worker* p = w.get();
    p->thread = std::thread([p] {
      set_thread_name("tls-pump");
      p->loop();
    });
  }
  impl_->started = true;
  return {};
}

void TlsPump::adopt(int fd) {
  if (!impl_->started || impl_->stop_requested.load()) {
    ::close(fd);
    return;
  }
  auto& w = *impl_->workers[impl_->next_worker++ % impl_->workers.size()];
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.incoming.push_back(fd);
  }
  uint64_t one = 1;
  ssize_t ignored = write(w.wake, &one, sizeof(one));
  (void)ignored;
}

void TlsPump::dial(int tcp, int plain, const std::string& host) {
  if (!impl_->started || impl_->stop_requested.load() || !impl_->context->options().dial) {
    ::close(tcp);
    ::close(plain);
    return;
  }
  auto& w = *impl_->workers[impl_->next_worker++ % impl_->workers.size()];
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.dialing.push_back({tcp, plain, host});
  }
  uint64_t one = 1;
  ssize_t ignored = write(w.wake, &one, sizeof(one));
  (void)ignored;
}

void TlsPump::stop_routing() {
  std::lock_guard<std::mutex> lock(impl_->route_mu);
  impl_->routing_stopped = true;
}

void TlsPump::stop() {
  if (!impl_) return;
  impl_->stop_requested = true;
  for (auto& w : impl_->workers) {
    uint64_t one = 1;
    ssize_t ignored = write(w->wake, &one, sizeof(one));
    (void)ignored;
  }
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  impl_->workers.clear();
}

std::string TlsPump::peer_common_name(int fd) {
  std::lock_guard<std::mutex> lock(names_mu);
  auto it = names.find(fd);
  return it == names.end() ? "" : it->second.second;
}

void TlsPump::reject_plaintext(int fd, const std::string& role) {
  static std::mutex mu;
  static Clock::time_point second{};
  static int logged = 0;
  bool log = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto now = Clock::now();
    if (now - second >= std::chrono::seconds(1)) {
      second = now;
      logged = 0;
    }
    log = ++logged <= kRejectLogsPerSecond;
  }
  if (log) {
    spdlog::warn("rejected connection on {} URL from {}: tls: first record does not look like a TLS handshake", role,
                 common::remote_address(fd));
  }
  // What the client sent is read first (the mux only peeked it): closing
  // with unread bytes would reset the connection, where etcd's ends it
  // (curl: "Empty reply from server").
  char buf[4096];
  for (int i = 0; i < 4 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; ++i) {
  }
  shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

}  // namespace etcdq::net
