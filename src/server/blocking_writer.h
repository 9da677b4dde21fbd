// A server-streaming reactor whose messages come from a thread of its own
// that may block: the snapshot streams (Maintenance.Snapshot to clients,
// Peer.FetchSnapshot to members) read storage at their own pace and wait
// for each message to be taken, so at most one message is held per call.
//
// A receiver that takes nothing for `stall` gets its call cancelled, so a
// stuck client or member frees the thread and the storage snapshot.
//
// Thread-safety: send() from the producing thread only (one at a time);
// OnWriteDone comes on gRPC's threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace etcdq::server {

template <class Response>
class BlockingWriter : public grpc::ServerWriteReactor<Response> {
 public:
  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      written_ = true;
      write_ok_ = ok;
    }
    cv_.notify_all();
  }

 protected:
  BlockingWriter(grpc::CallbackServerContext* call, std::chrono::milliseconds stall) : call_(call), stall_(stall) {}

  // Blocks until the receiver took `*msg` (which must live until then);
  // false if the call ended or stalled longer than `stall`.
  bool send(const Response* msg) { return start(msg) && wait_written(); }

  // Pipelined: waits for the write before (if any) to be taken, then starts
  // writing `*msg` and returns, so the producer fills its next message while
  // this one is on its way (a peer's snapshot stream alternates two
  // messages: peer_service.cc). `*msg` must live until the next start() or
  // wait_written() returned. False if the call ended or stalled.
  bool start(const Response* msg) {
    if (!wait_written()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      written_ = false;
      pending_ = true;
    }
    this->StartWrite(msg);
    return true;
  }

  // Waits until the message started last (if any) was taken; false if the
  // call ended or stalled longer than `stall` (then cancelled).
  bool wait_written() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!pending_) return write_ok_ || !started_once_;
    if (!cv_.wait_for(lock, stall_, [this] { return written_; })) {
      call_->TryCancel();  // OnWriteDone(false) follows
      cv_.wait(lock, [this] { return written_; });
    }
    pending_ = false;
    started_once_ = true;
    return write_ok_;
  }

  grpc::CallbackServerContext* call_;

 private:
  const std::chrono::milliseconds stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool written_ = false;
  bool write_ok_ = false;
  bool pending_ = false;       // a write started and not yet waited for
  bool started_once_ = false;  // some write was waited for (write_ok_ is its result)
};

}  // namespace etcdq::server
