// Threads that answer proposals. Answering a gRPC call (moving the result
// into the response, Finish) costs more than applying the command; done on
// the consensus thread it would hold up the next log append. The consensus
// thread hands each applied entry's answers over as one task.
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

namespace etcdq::raft {

class CompletionPool {
 public:
  explicit CompletionPool(int threads);
  ~CompletionPool();
  void post(std::function<void()> task);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace etcdq::raft
