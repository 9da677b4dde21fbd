#include "http/connections.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace etcdq::http {

struct Connections::Conn {
  int fd = -1;
  const Handler* serve = nullptr;
  std::string in;   // received, not yet served
  std::string out;  // response bytes not yet written
  size_t out_pos = 0;
  size_t served = 0;
  bool keep_open = true;
  std::shared_ptr<Reply> reply;  // a deferred response (reply.h)
  bool registered = false;      // in the epoll set
  bool for_write = false;       // ... waiting to write (else to read)
  Clock::time_point since;      // waiting for this connection since (idle, request or write start)
  Clock::time_point deadline;
};

namespace {

// Where the header ends (past its blank line), or npos.
size_t header_end(const std::string& in) {
  size_t p = in.find("\r\n\r\n");
  return p == std::string::npos ? p : p + 4;
}

// The Content-Length the header announces (0 when none); false when it is
// not a number.
bool content_length(const std::string& in, size_t end, size_t* n) {
  static const char kName[] = "\r\ncontent-length:";
  const size_t name_len = sizeof(kName) - 1;
  *n = 0;
  for (size_t i = 0; i + name_len <= end; ++i) {
    if (strncasecmp(in.data() + i, kName, name_len) != 0) continue;
    size_t j = i + name_len;
    while (j < end && (in[j] == ' ' || in[j] == '\t')) ++j;
    size_t v = 0;
    size_t digits = 0;
    for (; j < end && in[j] >= '0' && in[j] <= '9'; ++j, ++digits) {
      if (v > (SIZE_MAX - 9) / 10) return false;
      v = v * 10 + static_cast<size_t>(in[j] - '0');
    }
    if (digits == 0) return false;
    *n = v;
    return true;
  }
  return true;
}

// Whether the header block (up to `end`) names a Transfer-Encoding. Bodies
// are framed by Content-Length only: a chunked body read as if it had none
// would leave its bytes to be parsed as further requests (smuggling), so
// such a request is refused and its connection closed (RFC 9112 6.1: 501
// for a transfer coding the server does not implement).
bool has_transfer_encoding(const std::string& in, size_t end) {
  static const char kName[] = "\r\ntransfer-encoding:";
  const size_t name_len = sizeof(kName) - 1;
  for (size_t i = 0; i + name_len <= end; ++i) {
    if (strncasecmp(in.data() + i, kName, name_len) == 0) return true;
  }
  return false;
}

}  // namespace

Connections::Connections(Classifier slow, size_t max_body_bytes)
    : max_body_bytes_(max_body_bytes), slow_(std::move(slow)) {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up fd
  epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_fd_, &ev);
  loop_thread_ = std::thread([this] { loop(); });
  for (size_t i = 0; i < kWorkers; ++i) workers_.emplace_back([this] { work(0); });
  for (size_t i = 0; i < kSlowWorkers; ++i) workers_.emplace_back([this] { work(1); });
}

Connections::~Connections() { stop(); }

void Connections::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !loop_thread_.joinable()) return;
    stopping_ = true;
  }
  wake();
  for (auto& cv : work_cv_) cv.notify_all();
  if (loop_thread_.joinable()) loop_thread_.join();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
  // What the threads left behind.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [fd, serve] : adopted_) ::close(fd);
  adopted_.clear();
  for (auto& lane : jobs_) {
    for (auto& c : lane) ::close(c->fd);
    lane.clear();
  }
  for (auto& c : served_) {
    if (c->reply) c->reply->cancel();
    ::close(c->fd);
  }
  served_.clear();
  if (epoll_ >= 0) ::close(epoll_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  epoll_ = wake_fd_ = -1;
}

void Connections::adopt(int fd, const Handler* serve) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    adopted_.emplace_back(fd, serve);
  }
  wake();
}

void Connections::wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void Connections::watch(Conn* c, bool for_write) {
  epoll_event ev{};
  ev.events = for_write ? EPOLLOUT : EPOLLIN;
  ev.data.ptr = c;
  epoll_ctl(epoll_, c->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev);
  c->registered = true;
  c->for_write = for_write;
}

void Connections::close_conn(Conn* c) {
  if (c->reply) c->reply->cancel();  // the producer stops (the gateway cancels its call)
  replying_.erase(c);
  ::close(c->fd);  // also leaves the epoll set
  waiting_.erase(c);
}

void Connections::pump(Conn* c) {
  if (!c->out.empty()) return;  // what it took before is still being written
  bool finished = false;
  bool keep_open = true;
  c->reply->take(&c->out, &finished, &keep_open);
  if (finished) {
    c->reply.reset();
    replying_.erase(c);
    c->keep_open = c->keep_open && keep_open;
    if (c->out.empty() && !c->keep_open) {
      close_conn(c);
      return;
    }
  }
  if (!c->out.empty() || finished) {
    after_output(c);
    return;
  }
  // Nothing to send yet: no deadline (a watch may be quiet for hours), but
  // notice the client leaving.
  c->deadline = Clock::time_point::max();
  if (!c->registered || c->for_write) watch(c, /*for_write=*/false);
}

void Connections::evict_longest_waiting() {
  Conn* oldest = nullptr;
  for (auto& [p, c] : waiting_) {
    if (oldest == nullptr || c->since < oldest->since) oldest = p;
  }
  if (oldest != nullptr) close_conn(oldest);
}

bool Connections::request_complete(const Conn& c) const {
  size_t end = header_end(c.in);
  if (end == std::string::npos) return false;
  size_t body = 0;
  content_length(c.in, end, &body);
  return c.in.size() - end >= body;
}

void Connections::dispatch(Conn* c) {
  if (c->registered) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, c->fd, nullptr);
    c->registered = false;
  }
  auto it = waiting_.find(c);
  std::unique_ptr<Conn> owned = std::move(it->second);
  waiting_.erase(it);
  size_t lane = slow_ && slow_(owned->in) ? 1 : 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[lane].push_back(std::move(owned));
    ++busy_;
  }
  work_cv_[lane].notify_one();
}

void Connections::on_readable(Conn* c) {
  char buf[16 << 10];
  for (;;) {
    ssize_t n = ::recv(c->fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      close_conn(c);  // the client went away
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (c->in.empty() && !c->reply) {  // a request starts: it has kRequestTimeout to arrive
      c->since = Clock::now();
      c->deadline = c->since + kRequestTimeout;
    }
    c->in.append(buf, static_cast<size_t>(n));
    if (c->in.size() > kMaxHeaderBytes + max_body_bytes_) break;
  }
  if (c->reply) {  // a deferred response is running: the next request waits for it
    if (c->in.size() > kMaxHeaderBytes + max_body_bytes_) close_conn(c);
    return;
  }
  size_t end = header_end(c->in);
  size_t body = 0;
  const char* refusal = nullptr;
  if ((end == std::string::npos && c->in.size() > kMaxHeaderBytes) || (end != std::string::npos && end > kMaxHeaderBytes)) {
    refusal = "431 Request Header Fields Too Large";
  } else if (end != std::string::npos && has_transfer_encoding(c->in, end)) {
    refusal = "501 Not Implemented";
  } else if (end != std::string::npos && !content_length(c->in, end, &body)) {
    refusal = "400 Bad Request";
  } else if (end != std::string::npos && body > max_body_bytes_) {
    refusal = "413 Payload Too Large";
  }
  if (refusal != nullptr) {  // say why, then close
    c->in.clear();
    c->out = std::string("HTTP/1.1 ") + refusal + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    c->keep_open = false;
    after_output(c);
    return;
  }
  if (request_complete(*c)) dispatch(c);
}

void Connections::on_writable(Conn* c) {
  while (c->out_pos < c->out.size()) {
    ssize_t n = ::send(c->fd, c->out.data() + c->out_pos, c->out.size() - c->out_pos, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      watch(c, /*for_write=*/true);
      return;
    }
    if (n <= 0) {
      close_conn(c);
      return;
    }
    c->out_pos += static_cast<size_t>(n);
    if (c->reply) c->deadline = Clock::now() + kWriteTimeout;  // a stream: each write's progress counts
  }
  c->out.clear();
  c->out.shrink_to_fit();
  c->out_pos = 0;
  if (c->reply) {
    pump(c);
    return;
  }
  if (!c->keep_open) {
    close_conn(c);
    return;
  }
  // Idle until the next request (which may be here already: pipelining).
  c->since = Clock::now();
  c->deadline = c->since + (c->in.empty() ? kIdleTimeout : kRequestTimeout);
  if (request_complete(*c)) {
    dispatch(c);
  } else {
    watch(c, /*for_write=*/false);
  }
}

void Connections::after_output(Conn* c) {
  c->since = Clock::now();
  c->deadline = c->since + kWriteTimeout;
  on_writable(c);
}

void Connections::loop() {
  std::vector<epoll_event> events(64);
  auto next_sweep = Clock::now();
  for (;;) {
    int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 100);
    std::vector<std::pair<int, const Handler*>> adopted;
    std::vector<std::unique_ptr<Conn>> served;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
      adopted.swap(adopted_);
      served.swap(served_);
    }
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Conn*>(events[i].data.ptr);
      if (c == nullptr) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof(v));
        continue;
      }
      if (!waiting_.count(c)) continue;  // closed by an earlier event of this round
      if (!c->out.empty()) {
        on_writable(c);
      } else {
        on_readable(c);
      }
    }
    for (auto& c : served) {
      Conn* p = c.get();
      waiting_[p] = std::move(c);
      if (p->reply) {
        replying_.insert(p);
        // A dup of the wake-up fd, owned by the closure: a producer that
        // wakes after this object is gone writes to a file still open.
        auto fd = std::shared_ptr<int>(new int(::dup(wake_fd_)), [](int* f) {
          if (*f >= 0) ::close(*f);
          delete f;
        });
        p->reply->attach([fd] {
          uint64_t one = 1;
          [[maybe_unused]] ssize_t w = ::write(*fd, &one, sizeof(one));
        });
        pump(p);
      } else {
        after_output(p);
      }
    }
    // Deferred responses with something new (woken, or a write finished).
    if (!replying_.empty()) {
      std::vector<Conn*> ready(replying_.begin(), replying_.end());
      for (Conn* p : ready) {
        if (replying_.count(p) && p->out.empty() && p->reply->pending()) pump(p);
      }
    }
    for (auto& [fd, serve] : adopted) {
      size_t busy;
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy = busy_;
      }
      if (waiting_.size() + busy >= kMaxConnections) evict_longest_waiting();
      if (waiting_.size() + busy >= kMaxConnections) {  // every one is being served
        ::close(fd);
        continue;
      }
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->serve = serve;
      c->since = Clock::now();
      c->deadline = c->since + kIdleTimeout;
      Conn* p = c.get();
      waiting_[p] = std::move(c);
      watch(p, /*for_write=*/false);
    }
    auto now = Clock::now();
    if (now >= next_sweep) {
      next_sweep = now + std::chrono::milliseconds(100);
      std::vector<Conn*> expired;
      for (auto& [p, c] : waiting_) {
        if (c->deadline <= now) expired.push_back(p);
      }
      for (Conn* p : expired) close_conn(p);
    }
  }
  for (auto& [p, c] : waiting_) {
    if (c->reply) c->reply->cancel();
    ::close(c->fd);
  }
  waiting_.clear();
  replying_.clear();
}

void Connections::work(size_t lane) {
  for (;;) {
    std::unique_ptr<Conn> c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_[lane].wait(lock, [this, lane] { return stopping_ || !jobs_[lane].empty(); });
      if (stopping_) return;
      c = std::move(jobs_[lane].front());
      jobs_[lane].pop_front();
    }
    bool last = ++c->served >= kMaxRequestsPerConnection;
    bool keep_open = true;
    size_t used = (*c->serve)(c->fd, c->in, last, &c->out, &keep_open, &c->reply);
    c->in.erase(0, std::min(used, c->in.size()));
    c->keep_open = keep_open && !last;
    if (c->out.empty() && !c->reply && c->keep_open) c->keep_open = false;  // nothing to say: a broken request
    {
      std::lock_guard<std::mutex> lock(mu_);
      --busy_;
      served_.push_back(std::move(c));
    }
    wake();
  }
}

}  // namespace etcdq::http
