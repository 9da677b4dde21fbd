// The connections of the HTTP side (server.h): every wait on the network
// happens here, on one epoll thread, so that no connection can hold a thread
// while it is idle or slow.
//
// cpp-httplib serves a connection on one pool thread from accept to close,
// blocking in read: 8 idle connections (its default pool) kept /health from
// ever answering, and a client that sends its header a byte at a time
// (slowloris) holds a thread indefinitely, since its read timeout is per
// read. etcd (Go) gives each connection a goroutine and never starves. Here
// cpp-httplib still parses, routes and writes each request and response,
// but only once the whole request is in memory: this thread reads
// requests, without blocking, until the header and the body its
// Content-Length announces are complete (request_framing.h: a chunked body
// is decoded as it arrives, chunked.h, and handed on framed by
// Content-Length, under the same bound; another Transfer-Encoding gets
// 501), then hands the request to a
// worker, which runs cpp-httplib on it against memory (Handler) and gives
// back the response bytes; this thread writes them, again without
// blocking, and waits for the connection's next request (keep-alive).
// Workers never touch the network, so a handler's own run time is all a
// request costs them.
//
// Bounds: at most kMaxConnections open (a new one closes the one that has
// waited longest: a fresh health check always gets in); a connection idle
// for kIdleTimeout, a request not complete kRequestTimeout after its first
// byte, or a response not written within kWriteTimeout is closed; a header
// over kMaxHeaderBytes or a body over kMaxBodyBytes closes the connection.
// Memory is thus at most kMaxConnections × (header + body + response).
//
// Deferred responses (reply.h): a handler may answer later instead, from
// another thread (the JSON gateway's gRPC calls, streams included). The
// connection then waits here, costing no worker, with no idle deadline,
// for the reply's bytes: it takes them only once what it took before was
// written (so a slow reader holds back the producer, reply.h), writes them
// under kWriteTimeout per write's progress, and watches for the client
// going away (which cancels the reply). Such a connection counts towards
// kMaxConnections and, waiting longest, is the first evicted for a new one.
//
// Thread-safety: adopt() from any thread (cpp-httplib's accept threads);
// stop() once, from the owner. Handlers run on the worker threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "http/reply.h"

namespace etcdq::http {

class Connections {
 public:
  // Serves one complete request: reads it from `in` (header and body),
  // appends the response to `out`, sets `keep_open` false when the
  // connection must close after it (Connection: close, an error, or
  // `last`: the connection's last request). Returns the bytes of `in` it
  // consumed (the rest is the next, pipelined request). Or sets *later
  // (out stays empty): the response comes through that reply.
  using Handler = std::function<size_t(int fd, const std::string& in, bool last, std::string* out, bool* keep_open,
                                       std::shared_ptr<Reply>* later)>;

  // 1000 JSON gateway clients (etcd's benchmark scale) each keep a
  // connection: room for them and for health checks beside them.
  static constexpr size_t kMaxConnections = 2048;
  // Two lanes of workers. No request waits on a worker (the gateway and
  // the health checks answer later, reply.h), so a lane's workers are only
  // ever busy computing. The control lane (health checks, /metrics,
  // /version) runs at the process's priority, so a probe is answered at
  // once whatever else arrives; the bulk lane (the JSON gateway) runs at
  // nice kBulkNice (setpriority on each worker's thread id), so that
  // under contention the scheduler gives the CPU to gRPC first and a
  // gateway flood takes what gRPC leaves (etcd: "must not slow gRPC").
  static constexpr size_t kControlWorkers = 2;
  static constexpr size_t kBulkWorkers = 2;
  static constexpr int kBulkNice = 19;
  // Whether a complete request (its bytes) belongs to the bulk lane.
  using Classifier = std::function<bool(const std::string& request)>;
  static constexpr size_t kMaxRequestsPerConnection = 1000;
  static constexpr size_t kMaxHeaderBytes = 64 << 10;
  // The default; the JSON gateway (/v3/...) needs --max-request-bytes as
  // JSON (server.cc passes its bound to the constructor).
  static constexpr size_t kMaxBodyBytes = 64 << 10;
  static constexpr std::chrono::seconds kIdleTimeout{30};
  static constexpr std::chrono::seconds kRequestTimeout{10};
  static constexpr std::chrono::seconds kWriteTimeout{10};

  explicit Connections(Classifier bulk = nullptr, size_t max_body_bytes = kMaxBodyBytes);
  ~Connections();  // stop()

  // Takes ownership of an accepted socket; `serve` must outlive stop().
  void adopt(int fd, const Handler* serve);
  // Closes every connection and joins the threads. Idempotent.
  void stop();

 private:
  struct Conn;
  using Clock = std::chrono::steady_clock;

  void loop();     // the epoll thread
  void work(size_t lane);  // a worker thread
  void wake();
  void watch(Conn* c, bool for_write);
  void on_readable(Conn* c);
  void on_writable(Conn* c);
  void after_output(Conn* c);
  void advance(Conn* c);  // the request in c->in: refuse it, decode its chunks, dispatch it, or wait
  void refuse(Conn* c, const char* status);  // answers `status` and closes
  void dispatch(Conn* c);
  void close_conn(Conn* c);
  void evict_longest_waiting();
  void pump(Conn* c);  // a deferred response: take and write what its reply has

  int epoll_ = -1;
  int wake_fd_ = -1;
  // Owns wake_fd_: each deferred reply's wake-up closure holds a copy, so a
  // producer that wakes after this object is gone writes to a descriptor
  // still open (it closes when the last holder lets go).
  std::shared_ptr<const int> wake_owner_;
  std::thread loop_thread_;
  std::vector<std::thread> workers_;

  // Only the epoll thread touches these.
  std::unordered_map<Conn*, std::unique_ptr<Conn>> waiting_;  // reading a request or writing a response
  std::unordered_set<Conn*> replying_;                         // those of waiting_ with a deferred response
  size_t max_body_bytes_;

  std::mutex mu_;  // guards everything below
  std::condition_variable work_cv_[2];
  Classifier bulk_;
  std::vector<std::pair<int, const Handler*>> adopted_;
  std::deque<std::unique_ptr<Conn>> jobs_[2];   // complete requests for the workers, by lane
  std::vector<std::unique_ptr<Conn>> served_;   // back from the workers, response in `out`
  size_t busy_ = 0;                             // taken by workers or queued for them
  bool stopping_ = false;
};

}  // namespace etcdq::http
