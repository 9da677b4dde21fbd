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

#include "http/request_framing.h"

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
  // Where the request in `in` ends (a chunked body is decoded there).
  RequestFraming framing;
  explicit Conn(size_t max_body_bytes) : framing(kMaxHeaderBytes, max_body_bytes) {}
};

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
    if (c->in.empty() && !c->framing.decoding_chunks() && !c->reply) {
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
  c->framing.reset();
  // Go's answer to a request it cannot read (net/http server.go, conn.serve):
  // the status as the body, no length (the close ends it); 501's body is
  // "Unsupported transfer encoding".
  const bool te = std::strncmp(status, "501", 3) == 0;
  c->out = std::string("HTTP/1.1 ") + status +
           "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
           (te ? "Unsupported transfer encoding" : status);
  c->keep_open = false;
  after_output(c);
}

void Connections::advance(Conn* c) {
  const char* status = nullptr;
  switch (c->framing.advance(&c->in, &status)) {
    case RequestFraming::Verdict::kRefuse:
      return refuse(c, status);
    case RequestFraming::Verdict::kComplete:
      dispatch(c);
      return;
    case RequestFraming::Verdict::kMore:
      break;
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
      auto c = std::make_unique<Conn>(max_body_bytes_);
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
