// The libuv half of a raft_uv_transport whose connections are made by the
// transport itself (raw TCP behind the peer URL's mux in consensus/transport.h,
// an in-memory relay in tests/unit/memory_network.h). It implements the raft_uv_transport
// callbacks, keeps the connects libraft waits for, hands libraft the streams
// it reads or writes, and lets other threads run work on the loop.
//
// A transport derives from it and supplies only how a connection is made
// (start_connect) and who else must know it opened or closes (after_init,
// before_close). libraft's contract, kept here once (libraft 0.15,
// include/raft/uv.h): every callback runs on the loop thread; each connect
// is answered exactly once; a stream handed over is a uv_stream_t libraft
// owns and frees with raft_free; close_cb runs once nothing more will call
// libraft back.
//
// Threads:
//   loop thread - libraft's loop (the consensus thread): the callbacks,
//                 connected(), accept(), the hooks, and the tasks post() runs;
//   any thread  - post() and listening(), for threads that produce
//                 connections and must hand them to the loop.
// Loop-side state is touched on the loop thread only, so libraft is never
// called from elsewhere; mu_ guards the little the other threads share.
#pragma once

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace etcdq::consensus {

class UvBridge {
 public:
  UvBridge(const UvBridge&) = delete;
  UvBridge& operator=(const UvBridge&) = delete;

  // What raft_uv_init takes. Valid while this object lives; libraft must
  // have closed it (raft_close completed) before this object is destroyed.
  struct raft_uv_transport* raw() { return &t_; }

  // This member's id and address, as libraft gave them to init. Set before
  // the loop runs and read-only afterwards, so any thread may read them
  // once init returned.
  raft_id id() const { return id_; }
  const std::string& address() const { return address_; }

  // Any thread: runs `fn` on the loop thread. False once the transport
  // closed (then `fn` never runs, and the caller still owns what it holds).
  bool post(std::function<void()> fn);

  // Any thread: libraft listens (listen was called and close was not).
  bool listening();

  // Loop thread: answers the connect `key` once: with a stream on `fd`
  // when `status` is 0, else with `status` (RAFT_CANCELED once closing).
  // `fd` (or -1) is handed to libraft, or closed when the answer is an
  // error, `key` was answered already, or libuv refuses it (libraft then
  // gets RAFT_NOCONNECTION).
  void connected(uint64_t key, int fd, int status);
  // Loop thread: the same with a stream already open on the loop (a handle
  // allocated with raft_malloc, which libraft frees with raft_free once it
  // closed it), or null. A stream libraft does not take is closed and
  // freed here.
  void connected(uint64_t key, uv_stream_t* stream, int status);
  // Loop thread: hands libraft an incoming stream from member `from` read
  // from `fd`, or closes `fd` when libraft does not listen (not yet, or
  // closing) or libuv refuses it.
  void accept(raft_id from, const std::string& address, int fd);
  // Loop thread: close was called; nothing new should start.
  bool closing() const { return closing_; }

 protected:
  explicit UvBridge(uv_loop_t* loop);
  virtual ~UvBridge() = default;

  // Loop thread: libraft asked to connect to member `id` at `address`. The
  // transport answers later with connected(`key`, ...) posted to the loop,
  // never from inside this call (libraft expects the answer from the loop,
  // as after a real connect). If it cannot (post() is false once closed),
  // the bridge answers RAFT_CANCELED for it when the transport closes.
  virtual void start_connect(uint64_t key, raft_id id, const char* address) = 0;
  // Loop thread, from init once post() works: e.g. make the member known.
  virtual void after_init() {}
  // Loop thread, from close once listening() is false and before the last
  // tasks run: e.g. stop producing connections.
  virtual void before_close() {}

 private:
  struct Connecting {
    struct raft_uv_connect* req;
    raft_uv_connect_cb cb;
  };

  // A stream libraft owns (and frees with raft_free) on `fd`; null when
  // libuv refuses it (the caller still owns `fd` then).
  uv_stream_t* adopt(int fd);
  // Runs the posted tasks; once closing, also cancels the unanswered
  // connects and closes the async handle, whose close calls close_cb.
  void drain();

  static UvBridge* of(struct raft_uv_transport* t) { return static_cast<UvBridge*>(t->impl); }
  static int on_init(struct raft_uv_transport* t, raft_id id, const char* address);
  static int on_listen(struct raft_uv_transport* t, raft_uv_accept_cb cb);
  static int on_connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id id, const char* address,
                        raft_uv_connect_cb cb);
  static void on_close(struct raft_uv_transport* t, raft_uv_transport_close_cb cb);

  uv_loop_t* loop_;
  struct raft_uv_transport t_ {};
  uv_async_t async_{};
  raft_id id_ = 0;
  std::string address_;

  std::mutex mu_;  // guards open_, listening_ and tasks_
  bool open_ = false;       // post() accepts tasks
  bool listening_ = false;  // libraft accepts incoming streams
  std::vector<std::function<void()>> tasks_;

  // Loop thread only.
  raft_uv_accept_cb accept_cb_ = nullptr;
  raft_uv_transport_close_cb close_cb_ = nullptr;
  bool closing_ = false;
  std::map<uint64_t, Connecting> connecting_;  // connects libraft still waits for
  uint64_t next_connect_ = 1;
};

}  // namespace etcdq::consensus
