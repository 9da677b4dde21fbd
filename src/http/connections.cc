#include "http/connections.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "http/chunked.h"

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
  // A chunked request body being decoded: its header (framing headers
  // left out) waits in `head` while `in` holds the bytes not yet decoded.
  std::unique_ptr<ChunkedBody> chunked;
  std::string head;
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

// What the header block (up to `end`) says of Transfer-Encoding, as Go's
// net/http reads it (transfer.go, parseTransferEncoding): none; one
// "chunked" (the body is decoded here, chunked.h, and the request handed on
// framed by Content-Length, which a chunked request's own Content-Length
// does not override); anything else is refused with 501 (Go's
// "Unsupported transfer encoding"). An HTTP/1.0 request's is ignored, as
// Go does, and dropped, so that nothing after this reads it either.
enum class Framing { kLength, kLengthIgnoredTe, kChunked, kUnsupported };

bool is_header(const std::string& in, size_t pos, const char* name, size_t name_len) {
  return strncasecmp(in.data() + pos, name, name_len) == 0;
}

Framing framing(const std::string& in, size_t end) {
  static const char kName[] = "transfer-encoding:";
  const size_t name_len = sizeof(kName) - 1;
  size_t count = 0;
  std::string value;
  for (size_t pos = in.find("\r\n") + 2; pos < end;) {
    size_t next = in.find("\r\n", pos);
    if (next == std::string::npos || next > end) break;
    if (next - pos >= name_len && is_header(in, pos, kName, name_len)) {
      ++count;
      size_t a = pos + name_len, b = next;
      while (a < b && (in[a] == ' ' || in[a] == '\t')) ++a;
      while (b > a && (in[b - 1] == ' ' || in[b - 1] == '\t')) --b;
      value = in.substr(a, b - a);
    }
    pos = next + 2;
  }
  if (count == 0) return Framing::kLength;
  size_t eol = in.find("\r\n");
  if (eol >= 8 && in.compare(eol - 8, 8, "HTTP/1.0") == 0) return Framing::kLengthIgnoredTe;
  if (count == 1 && strcasecmp(value.c_str(), "chunked") == 0) return Framing::kChunked;
  return Framing::kUnsupported;
}

// The header block (up to `end`, its blank line included) without its
// Transfer-Encoding lines, without its Content-Length lines when
// `drop_length`, and without the blank line.
std::string without_framing(const std::string& in, size_t end, bool drop_length) {
  static const char kTe[] = "transfer-encoding:";
  static const char kCl[] = "content-length:";
  size_t eol = in.find("\r\n");
  std::string out = in.substr(0, eol + 2);
  for (size_t pos = eol + 2; pos + 2 < end;) {
    size_t next = in.find("\r\n", pos);
    if (next == std::string::npos || next > end) break;
    size_t len = next - pos;
    bool drop = (len >= sizeof(kTe) - 1 && is_header(in, pos, kTe, sizeof(kTe) - 1)) ||
                (drop_length && len >= sizeof(kCl) - 1 && is_header(in, pos, kCl, sizeof(kCl) - 1));
    if (!drop) out.append(in, pos, len + 2);
    pos = next + 2;
  }
  return out;
}

}  // namespace

Connections::Connections(Classifier bulk, size_t max_body_bytes)
    : max_body_bytes_(max_body_bytes), bulk_(std::move(bulk)) {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  wake_owner_ = std::shared_ptr<const int>(new int(wake_fd_), [](const int* f) {
    if (*f >= 0) ::close(*f);
    delete f;
  });
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up fd
  epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_fd_, &ev);
  // Named, for perf and top -H.
  loop_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "http-conns");
    loop();
  });
  for (size_t i = 0; i < kControlWorkers; ++i) {
    workers_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "http-control");
      work(0);
    });
  }
  for (size_t i = 0; i < kBulkWorkers; ++i) {
    workers_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "http-bulk");
      // Linux gives each thread its own nice value (setpriority(2), NOTES):
      // this lowers this worker alone (no privilege needed to lower one);
      // if it fails, the worker stays at normal priority.
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kBulkNice);
      work(1);
    });
  }
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
  wake_owner_.reset();  // closes wake_fd_ unless a reply's closure still holds it
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
    // Under the lock: stop() closes wake_fd_ under it, so the number
    // cannot be another descriptor by now.
    wake();
  }
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
  size_t lane = bulk_ && bulk_(owned->in) ? 1 : 0;
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
    // A request starts: it has kRequestTimeout to arrive, chunks included.
    if (c->in.empty() && !c->chunked && !c->reply) {
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
  advance(c);
}

void Connections::refuse(Conn* c, const char* status) {
  c->in.clear();
  c->chunked.reset();
  c->out = std::string("HTTP/1.1 ") + status + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  c->keep_open = false;
  after_output(c);
}

void Connections::advance(Conn* c) {
  if (!c->chunked) {
    size_t end = header_end(c->in);
    size_t body = 0;
    if ((end == std::string::npos && c->in.size() > kMaxHeaderBytes) || (end != std::string::npos && end > kMaxHeaderBytes)) {
      return refuse(c, "431 Request Header Fields Too Large");
    }
    if (end != std::string::npos) {
      Framing f = framing(c->in, end);
      if (f == Framing::kUnsupported) return refuse(c, "501 Not Implemented");
      if (f == Framing::kChunked) {
        c->head = without_framing(c->in, end, /*drop_length=*/true);
        c->in.erase(0, end);
        c->chunked = std::make_unique<ChunkedBody>(max_body_bytes_);
      } else if (!content_length(c->in, end, &body)) {
        return refuse(c, "400 Bad Request");
      } else if (body > max_body_bytes_) {
        return refuse(c, "413 Payload Too Large");
      } else if (f == Framing::kLengthIgnoredTe) {
        // Dropped, so that the HTTP server behind this does not frame the
        // body by it either (it would read a chunked body we did not bound).
        std::string head = without_framing(c->in, end, /*drop_length=*/false);
        head += "\r\n";
        c->in.replace(0, end, head);
      }
    }
  }
  if (c->chunked) {
    ChunkedBody::Status st;
    size_t used = c->chunked->feed(c->in, &st);
    c->in.erase(0, used);
    if (st == ChunkedBody::Status::kMalformed) return refuse(c, "400 Bad Request");
    if (st == ChunkedBody::Status::kTooLarge) return refuse(c, "413 Payload Too Large");
    if (st == ChunkedBody::Status::kDone) {
      // The request as if it had come with Content-Length; what follows
      // it (a pipelined request) stays behind it.
      std::string& body = c->chunked->body();
      std::string framed = std::move(c->head);
      framed += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
      framed += body;
      framed += c->in;
      c->in = std::move(framed);
      c->head.clear();
      c->chunked.reset();
    }
  }
  if (!c->chunked && request_complete(*c)) {
    dispatch(c);
    return;
  }
  if (!c->registered || c->for_write) watch(c, /*for_write=*/false);
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
  advance(c);
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
        p->reply->attach([fd = wake_owner_] {
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
