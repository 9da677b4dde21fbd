// The threads that start a watch stream's gRPC write when events arrive on
// an idle stream, when the apply thread (mvcc::WatchHub) does not: it starts
// a few streams' writes itself per applied entry (WatchHub::defer) and hands
// the rest here once the entry is dispatched, since gRPC's write path may
// write to the socket inline and many of those would hold up apply. A stream already writing needs none
// of this: its OnWriteDone starts the next write on gRPC's own thread, with
// everything queued by then.
//
// One post per stream that went from idle to ready, not per event: a stream
// is queued here at most once at a time (the stream keeps that flag).
//
// Thread-safety: post() from any thread. Kicked objects must stay alive
// until kick() returns (a stream does not finish while it is queued here).
#pragma once

#include <condition_variable>
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

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Kickable*> ready_;
  int idle_ = 0;  // threads waiting on cv_
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace etcdq::server
