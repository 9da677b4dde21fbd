// A response that is produced after the request's handler has returned: the
// JSON gateway's gRPC calls (gateway.h) answer from gRPC's threads, and a
// streaming call (/v3/watch, /v3/lease/keepalive, /v3/maintenance/snapshot,
// /v3/election/observe) writes for as long as it lives. The producer
// appends bytes; the connection's epoll thread (connections.h) takes them
// and sends them. No thread waits on either side.
//
// Bounds: write() reports kPaused once kMaxBuffered bytes wait (the HTTP
// reader is slower than the producer); the producer then stops producing
// (the gateway stops reading from gRPC, whose flow control then holds the
// server side) until `resume` runs, which happens once the connection has
// taken everything. So a stream costs at most kMaxBuffered plus one
// message here, plus what the connection is writing (the same again).
//
// A connection that goes away (or a server that stops) cancels the reply:
// `cancel` runs once (the gateway cancels its gRPC call) and every later
// write() returns kGone.
//
// Thread-safety: every function from any thread; callbacks run without the
// lock held (resume on the epoll thread, cancel on the thread that closes
// the connection, wake on the producer's).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace etcdq::http {

// The reason phrase of an HTTP/1.1 status line for the statuses etcdq's
// HTTP answers use ("Internal Server Error" for any other).
const char* reason_phrase(int status);

class Reply {
 public:
  static constexpr size_t kMaxBuffered = 1 << 20;
  enum class Write { kMore, kPaused, kGone };

  // Producer side. `resume` runs after a kPaused write once the buffer
  // drained; `cancel` when the connection goes first. Set both before the
  // first write.
  void set_callbacks(std::function<void()> resume, std::function<void()> cancel);
  Write write(std::string_view bytes);
  // The response is complete; `keep_open`: the connection may take another
  // request after it. Idempotent (the first call counts).
  void finish(bool keep_open);

  // Connection side. `wake` runs (on the producer's thread) whenever there
  // is something new to take.
  void attach(std::function<void()> wake);
  // Appends what is buffered to *out; *finished once finish() was called
  // and everything was taken.
  void take(std::string* out, bool* finished, bool* keep_open);
  // The connection is gone. Idempotent; detaches `wake`.
  void cancel();
  // Whether take() has something to give (cheap: the epoll thread asks
  // every deferred connection on each turn).
  bool pending() const { return pending_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::string buf_;
  bool paused_ = false;
  bool finished_ = false;
  bool keep_open_ = true;
  bool gone_ = false;
  std::atomic<bool> pending_{false};
  std::function<void()> resume_, cancel_, wake_;
};

}  // namespace etcdq::http
