// A fixed set of threads running posted tasks in order of posting (with one
// thread, strictly one after another). Used to answer proposals off the
// consensus thread (consensus/node.cc), to run the in-process client's
// callbacks (server/local_client.h), and bcrypt off gRPC's threads
// (server/auth_service.h).
//
// Thread-safety: post() from any thread. The destructor runs every task
// still queued, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace etcdq {

class Executor {
 public:
  // `name`: each thread's name (common/thread_name.h).
  Executor(int threads, const std::string& name);
  ~Executor();
  void post(std::function<void()> task);
  // post(), unless `max_queued` tasks already wait (running ones not
  // counted): then false, and `task` is dropped. Bounds what a flood of
  // requests can queue.
  bool try_post(std::function<void()> task, size_t max_queued);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace etcdq
