// Runs functions after a delay, on one thread of its own: the HTTP side's
// deadlines that nothing else wakes for (a health check's linearizable
// read gives up after etcd's request timeout, server.cc).
//
// Bounds: one entry per call of after() until its time comes or it is
// cancelled (a health check cancels its own once its read answered, so
// entries are as many as the checks still waiting).
//
// Thread-safety: after() from any thread; stop() (or the destructor) from
// the owner: entries not yet due are dropped without running.
#pragma once

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace etcdq::http {

class Timer {
 public:
  using Clock = std::chrono::steady_clock;

  Timer();
  ~Timer();  // stop()
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  using Id = std::pair<Clock::time_point, uint64_t>;
  // Runs `fn` on the timer's thread once `delay` passed (not at all after
  // stop() or cancel()).
  Id after(Clock::duration delay, std::function<void()> fn);
  // Drops an entry not yet run; nothing if it ran or is running.
  void cancel(const Id& id);
  void stop();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Id, std::function<void()>> due_;
  uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace etcdq::http
