// The threads that start a watch stream's gRPC write when events arrive on
// an idle stream, when the apply thread (mvcc::WatchHub) does not: it starts
// a few streams' writes itself per revision (WatchHub::defer) and hands the
// rest here, since gRPC's write path may write to the socket inline and
// many of those would hold up apply. A stream already writing needs none
// of this: its OnWriteDone starts the next write on gRPC's own thread, with
// everything queued by then.
//
// One post per stream that went from idle to ready, not per event: a stream
// is queued here at most once at a time (the stream keeps that flag).
//
// These threads also answer the proposals of an entry whose events they
// were handed (raft::Node::set_answer_route): the answers run once every
// write posted before them has started, so a watcher gets a put's event
// before the writer gets its answer, as from etcd (its apply goroutine
// queues the events for the watch streams before it wakes the put's
// handler). A stream that does not read never holds an answer back: it
// has a write in flight, so it is not posted here.
//
// Thread-safety: post() and post_after_writes() from any thread. Kicked
// objects must stay alive until kick() returns (a stream does not finish
// while it is queued here).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace etcdq::server {

class Kickable {
 public:
  virtual ~Kickable() = default;
  virtual void kick() = 0;  // on a writer thread, no lock held
};

class WatchWriters {
 public:
  explicit WatchWriters(int threads);
  ~WatchWriters();  // runs what is queued, then joins

  void post(Kickable* k);
  // Queues `task` to run once every kick posted before this call has run,
  // and returns true; returns false (and leaves `task` as it was) when no
  // posted kick is still waiting or running, so the caller runs it its
  // own way without waiting for these threads.
  bool post_after_writes(std::function<void()>& task);

 private:
  // A kick, or a task waiting until `kicks_before` kicks have finished.
  struct Item {
    Kickable* kick = nullptr;
    std::function<void()> task;
    uint64_t kicks_before = 0;
  };
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> ready_;
  uint64_t posted_ = 0;    // kicks ever posted
  uint64_t finished_ = 0;  // kicks ever run to the end
  int idle_ = 0;           // threads waiting on cv_
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace etcdq::server
