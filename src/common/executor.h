// A fixed set of threads running posted tasks in order of posting (with one
// thread, strictly one after another). Used to answer proposals off the
// consensus thread (raft/node.cc) and to run the in-process client's
// callbacks (server/local_client.h).
//
// Thread-safety: post() from any thread. The destructor runs every task
// still queued, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace etcdq {

class Executor {
 public:
  explicit Executor(int threads);
  ~Executor();
  void post(std::function<void()> task);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace etcdq
