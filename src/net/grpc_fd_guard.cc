#include "net/grpc_fd_guard.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <mutex>
#include <string_view>

#include "net/h2_guard.h"
#include "common/socket_address.h"

namespace etcdq::net {
namespace {

using Clock = H2Guard::Clock;

struct Guarded {
  explicit Guarded(H2Guard::Shared* shared) : guard(shared) {}
  std::mutex mu;  // gRPC may read and write the fd at once
  H2Guard guard;
  std::string role, peer;
  bool cut = false;
  bool refusal_logged = false;
  bool writing = false;  // a write of gRPC's is in the kernel now: no reply goes meanwhile
};

// fd -> its guard; zero-initialized, so pages no guarded fd reaches are
// never touched.
std::atomic<Guarded*> g_table[kMaxGuardedFd];

Guarded* guarded(int fd) {
  if (fd < 0 || fd >= kMaxGuardedFd) return nullptr;
  return g_table[fd].load(std::memory_order_acquire);
}

// libc's (or a sanitizer's) own definitions, next after the executable's.
template <typename F>
F next_definition(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}
using RecvmsgFn = ssize_t (*)(int, struct msghdr*, int);
using SendmsgFn = ssize_t (*)(int, const struct msghdr*, int);
using CloseFn = int (*)(int);

std::mutex g_log_mu;
Clock::time_point g_log_second{};
int g_logs_this_second = 0;

// At most 5 of the guard's warnings a second, all connections together: an
// attacker's connections must not flood the log.
bool fd_guard_log_allowed() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  auto now = Clock::now();
  if (now - g_log_second >= std::chrono::seconds(1)) {
    g_log_second = now;
    g_logs_this_second = 0;
  }
  return ++g_logs_this_second <= 5;
}

void log_cut(const Guarded& g, const char* why) {
  if (!fd_guard_log_allowed()) return;
  spdlog::warn("{} connection from {}: closed: {}", g.role, g.peer, why);
}


// Writes what the guard owes the client (its refusals of streams past the
// cap) when gRPC's output is between frames and no write of gRPC's is under
// way (guarded_write below marks it), so nothing of gRPC's is half sent now
// unless the guard's out parse says so. g.mu held. A full socket leaves the
// rest for the next read or write of this fd.
void send_replies(int fd, Guarded& g) {
  if (g.writing) return;  // that write's end sends them
  while (!g.guard.replies().empty() && (g.guard.replies_mid_frame() || g.guard.server_between_frames())) {
    std::string_view r = g.guard.replies();
    ssize_t w = ::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0) return;
    g.guard.replies_sent(static_cast<size_t>(w));
  }
}

void log_refusal(const Guarded& g) {
  if (!fd_guard_log_allowed()) return;
  spdlog::warn("{} connection from {}: refusing new streams past {} open at once (RST_STREAM REFUSED_STREAM)", g.role,
               g.peer, H2Guard::kMaxConcurrentStreams);
}

// What gRPC read into `msg` (n bytes) passes the guard; the count it may
// see is returned, and a cut connection is shut down.
ssize_t admit_read(int fd, Guarded& g, struct msghdr* msg, ssize_t n) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.cut) return 0;
  auto now = Clock::now();
  size_t left = static_cast<size_t>(n), passed = 0;
  for (size_t i = 0; i < msg->msg_iovlen && left > 0; ++i) {
    size_t len = std::min(left, msg->msg_iov[i].iov_len);
    Clock::time_point resume;
    size_t ok = g.guard.admit(static_cast<char*>(msg->msg_iov[i].iov_base), len, now, &resume);
    passed += ok;
    if (ok < len) {
      g.cut = true;
      log_cut(g, g.guard.why());
      ::shutdown(fd, SHUT_RDWR);  // gRPC's next read sees the end
      return static_cast<ssize_t>(passed);
    }
    left -= len;
  }
  if (!g.guard.replies().empty()) {
    if (!g.refusal_logged) {
      g.refusal_logged = true;
      log_refusal(g);
    }
    send_replies(fd, g);
  }
  return n;
}

void show_write(Guarded& g, const struct msghdr* msg, ssize_t n) {
  auto now = Clock::now();
  size_t left = static_cast<size_t>(n);
  for (size_t i = 0; i < msg->msg_iovlen && left > 0; ++i) {
    size_t len = std::min(left, msg->msg_iov[i].iov_len);
    g.guard.server_sent(static_cast<const char*>(msg->msg_iov[i].iov_base), len, now);
    left -= len;
  }
}

// gRPC's write of `msg`, shown to the guard, with the guard's replies put
// between gRPC's frames.
ssize_t guarded_write(SendmsgFn next, int fd, Guarded& g, const struct msghdr* msg, int flags) {
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.guard.replies_mid_frame()) {
      send_replies(fd, g);
      if (g.guard.replies_mid_frame()) {  // gRPC waits for the socket, as on any full one
        errno = EAGAIN;
        return -1;
      }
    }
    g.writing = true;
  }
  ssize_t n = next ? next(fd, msg, flags) : syscall(SYS_sendmsg, fd, msg, flags);
  int saved = errno;
  std::lock_guard<std::mutex> lock(g.mu);
  g.writing = false;
  if (n > 0) show_write(g, msg, n);
  if (!g.guard.replies().empty()) send_replies(fd, g);
  errno = saved;
  return n;
}

}  // namespace

bool guard_grpc_fd(int fd, const std::string& role) {
  if (fd < 0 || fd >= kMaxGuardedFd) return false;
  auto* g = new Guarded(H2Guard::process_shared());
  g->role = role;
  g->peer = common::remote_address(fd);
  delete g_table[fd].exchange(g, std::memory_order_acq_rel);  // a leftover would be a bug; never leak it
  return true;
}

std::function<void(int)> guarded_route(std::function<void(int)> adopt, const std::string& role) {
  return [adopt = std::move(adopt), role](int fd) {
    if (!guard_grpc_fd(fd, role)) {
      ::close(fd);
      return;
    }
    adopt(fd);
  };
}

}  // namespace etcdq::net

// The interposed calls. Unguarded fds cost one table lookup.
extern "C" {

ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  static auto next = etcdq::net::next_definition<etcdq::net::RecvmsgFn>("recvmsg");
  ssize_t n = next ? next(fd, msg, flags) : syscall(SYS_recvmsg, fd, msg, flags);
  if (n <= 0 || (flags & MSG_PEEK)) return n;
  etcdq::net::Guarded* g = etcdq::net::guarded(fd);
  return g ? etcdq::net::admit_read(fd, *g, msg, n) : n;
}

ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  static auto next = etcdq::net::next_definition<etcdq::net::SendmsgFn>("sendmsg");
  if (etcdq::net::Guarded* g = etcdq::net::guarded(fd)) return etcdq::net::guarded_write(next, fd, *g, msg, flags);
  return next ? next(fd, msg, flags) : syscall(SYS_sendmsg, fd, msg, flags);
}

int close(int fd) {
  static auto next = etcdq::net::next_definition<etcdq::net::CloseFn>("close");
  if (fd >= 0 && fd < etcdq::net::kMaxGuardedFd) {
    delete etcdq::net::g_table[fd].exchange(nullptr, std::memory_order_acq_rel);
  }
  return next ? next(fd) : static_cast<int>(syscall(SYS_close, fd));
}

}  // extern "C"
