#include "net/mux.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <string_view>
#include <unordered_map>

#include "common/log_limiter.h"
#include "common/thread_name.h"

namespace etcdq::net {
namespace {

constexpr std::string_view kPreface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);

using Clock = std::chrono::steady_clock;

std::string system_error(int err) { return std::strerror(err); }

}  // namespace

Sniffed sniff(const char* data, size_t n) {
  size_t m = std::min(n, kPreface.size());
  if (std::string_view(data, m) != kPreface.substr(0, m)) return Sniffed::kOther;
  return m == kPreface.size() ? Sniffed::kHttp2 : Sniffed::kNeedMore;
}

struct Mux::Impl {
  struct Pending {
    int fd;
    Clock::time_point since;
  };

  Routes routes;
  std::string role;
  size_t peek_bytes = kPreface.size();  // enough for the preface and every magic
  int epoll = -1;
  int wake = -1;
  std::vector<int> listeners;
  std::vector<std::string> names;  // "host:port" of each listener, for logs
  // Waiting connections in arrival order, and where each is in that list.
  std::list<Pending> pending;
  std::unordered_map<int, std::list<Pending>::iterator> by_fd;
  std::thread thread;
  std::atomic<bool> stop_requested{false};

  ~Impl() {
    for (int fd : listeners) ::close(fd);
    for (auto& p : pending) ::close(p.fd);
    if (wake >= 0) ::close(wake);
    if (epoll >= 0) ::close(epoll);
  }

  // Tags in epoll's data: listeners are marked so one lookup tells them
  // from connections.
  static constexpr uint64_t kListenerTag = uint64_t{1} << 32;
  static constexpr uint64_t kWakeTag = uint64_t{1} << 33;

  void drop(int fd) {
    auto it = by_fd.find(fd);
    if (it == by_fd.end()) return;
    pending.erase(it->second);
    by_fd.erase(it);
    epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
  }

  void close_pending(int fd) {
    drop(fd);
    ::close(fd);
  }

  void accept_all(int lfd) {
    for (;;) {
      int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) pause_accepting(errno);
        return;
      }
      if (fd >= Mux::connection_fd_ceiling()) {
        // Descriptors are handed out lowest first: every one below this is
        // in use, and what is left is the member's own (RocksDB's files,
        // its peers, its WAL), which a flood of connections must not take.
        ::close(fd);
        pause_accepting(EMFILE, " (the last descriptors are kept for the member's own files)");
        return;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      if (pending.size() >= kMaxPending) close_pending(pending.front().fd);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
      ev.data.u64 = static_cast<uint64_t>(fd);
      if (epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        continue;
      }
      pending.push_back({fd, Clock::now()});
      by_fd[fd] = std::prev(pending.end());
      // Data that arrived with the handshake raises no new edge for a
      // socket registered after it: look now.
      route_if_ready(fd);
    }
  }

  // Out of descriptors (or another accept failure): the listeners stay
  // readable, so waiting on them again at once would spin. Stop watching
  // them for kAcceptPause (the backlog keeps the connections), and warn at
  // most once per 10 s, as Go's net/http backs off.
  static constexpr auto kAcceptPause = std::chrono::milliseconds(100);
  Clock::time_point resume_accept{};
  LogLimiter accept_warnings{1, std::chrono::seconds(10)};

  void arm_listeners(bool on) {
    for (int lfd : listeners) {
      epoll_event ev{};
      ev.events = on ? static_cast<uint32_t>(EPOLLIN) : 0u;
      ev.data.u64 = kListenerTag | static_cast<uint64_t>(lfd);
      epoll_ctl(epoll, EPOLL_CTL_MOD, lfd, &ev);
    }
  }

  void pause_accepting(int err, const char* why = "") {
    auto now = Clock::now();
    if (uint64_t left_out = 0; accept_warnings.allow(&left_out)) {
      spdlog::warn("cannot accept {} connections ({} failures): {}{}; pausing {} ms at a time", role, left_out + 1,
                   system_error(err), why, kAcceptPause.count());
    }
    // The longest-waiting silent connection gives its descriptor back.
    if (!pending.empty()) close_pending(pending.front().fd);
    resume_accept = now + kAcceptPause;
    arm_listeners(false);
  }

  // The route for a connection that opened with `data`; nullptr (and
  // *need_more) while its first bytes could still start more than one.
  const Route* classify(const char* data, size_t n, bool* need_more) const {
    size_t which = 0;
    Picked picked = pick_route(data, n, routes.prefixed, &which);
    *need_more = picked == Picked::kNeedMore;
    switch (picked) {
      case Picked::kNeedMore: return nullptr;
      case Picked::kPrefixed: return &routes.prefixed[which].route;
      case Picked::kHttp2: return &routes.http2;
      case Picked::kHttp1: break;
    }
    return &routes.http1;
  }

  void route_if_ready(int fd) {
    char buf[256];
    ssize_t n;
    do {
      n = recv(fd, buf, std::min(sizeof(buf), peek_bytes), MSG_PEEK);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // closed before saying anything, or an error
      close_pending(fd);
      return;
    }
    bool need_more = false;
    const Route* found = classify(buf, static_cast<size_t>(n), &need_more);
    if (need_more) return;  // the next bytes raise a new edge
    drop(fd);
    const Route& route = *found;
    if (!route) {
      ::close(fd);
      return;
    }
    route(fd);
  }

  void expire() {
    auto deadline = Clock::now() - kSniffTimeout;
    while (!pending.empty() && pending.front().since < deadline) close_pending(pending.front().fd);
  }

  void loop() {
    epoll_event events[64];
    while (!stop_requested.load()) {
      int timeout_ms = 1000;
      if (resume_accept != Clock::time_point{}) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(resume_accept - Clock::now()).count();
        if (left <= 0) {
          resume_accept = {};
          arm_listeners(true);
        } else {
          timeout_ms = static_cast<int>(left);
        }
      }
      int n = epoll_wait(epoll, events, 64, timeout_ms);
      if (n < 0 && errno != EINTR) {
        spdlog::error("{} connection mux: epoll_wait failed: {}", role, system_error(errno));
        return;
      }
      for (int i = 0; i < n; ++i) {
        uint64_t tag = events[i].data.u64;
        if (tag == kWakeTag) continue;
        if (tag & kListenerTag) {
          accept_all(static_cast<int>(tag & 0xffffffffu));
        } else {
          int fd = static_cast<int>(tag);
          if (by_fd.count(fd)) route_if_ready(fd);
        }
      }
      expire();
    }
  }
};

int Mux::connection_fd_ceiling() {
  static const int ceiling = [] {
    rlimit r{};
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return INT32_MAX;
    auto limit = static_cast<int64_t>(r.rlim_cur);
    int64_t reserve = std::clamp<int64_t>(limit / 8, kMinFdReserve, kMaxFdReserve);
    return static_cast<int>(std::max<int64_t>(limit - reserve, limit / 2));
  }();
  return ceiling;
}

Mux::Mux(Routes routes, std::string role) : impl_(std::make_unique<Impl>()) {
  impl_->routes = std::move(routes);
  impl_->role = std::move(role);
  for (const auto& p : impl_->routes.prefixed) impl_->peek_bytes = std::max(impl_->peek_bytes, p.magic.size());
}

Mux::~Mux() { stop(); }

Error Mux::listen(const std::vector<std::pair<std::string, int>>& addresses) {
  for (const auto& a : addresses) {
    std::string name = a.first + ":" + std::to_string(a.second);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string host = a.first;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(a.second).c_str(), &hints, &res);
    if (rc != 0 || !res) {
      return {Code::kInvalidArgument, "cannot listen for " + impl_->role + "s on " + name + ": " + gai_strerror(rc)};
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      int err = errno;
      if (fd >= 0) ::close(fd);
      freeaddrinfo(res);
      return {Code::kUnavailable, "cannot listen for " + impl_->role + "s on " + name + ": " + system_error(err)};
    }
    freeaddrinfo(res);
    impl_->listeners.push_back(fd);
    impl_->names.push_back(name);
  }
  return {};
}

Error Mux::start() {
  Impl& m = *impl_;
  m.epoll = epoll_create1(EPOLL_CLOEXEC);
  m.wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.epoll < 0 || m.wake < 0) return {Code::kInternal, m.role + " connection mux: " + system_error(errno)};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = Impl::kWakeTag;
  epoll_ctl(m.epoll, EPOLL_CTL_ADD, m.wake, &ev);
  for (int fd : m.listeners) {
    ev.events = EPOLLIN;
    ev.data.u64 = Impl::kListenerTag | static_cast<uint64_t>(fd);
    if (epoll_ctl(m.epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return {Code::kInternal, m.role + " connection mux: " + system_error(errno)};
    }
  }
  m.thread = std::thread([&m] {
    set_thread_name("mux-" + m.role);
    m.loop();
  });
  return {};
}

void Mux::stop() {
  if (!impl_) return;
  Impl& m = *impl_;
  m.stop_requested = true;
  if (m.wake >= 0) {
    uint64_t one = 1;
    ssize_t ignored = write(m.wake, &one, sizeof(one));
    (void)ignored;
  }
  if (m.thread.joinable()) m.thread.join();
  for (int fd : m.listeners) ::close(fd);
  m.listeners.clear();
  for (auto& p : m.pending) ::close(p.fd);
  m.pending.clear();
  m.by_fd.clear();
}

}  // namespace etcdq::net
