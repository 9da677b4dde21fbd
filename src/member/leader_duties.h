// Leader-only work — lease expiry, the queue scheduler's assignments, the
// ClickHouse sink, auto-compaction — starts when this member becomes leader and stops when it
// stops leading, driven by consensus::Node's role-change hook (braft's
// on_leader_start / on_leader_stop), never by polling is_leader.
//
// The hook runs on the consensus thread and must not block, so
// role_changed() only records the newest role and wakes this object's
// thread, which calls each duty's start or stop, in the order they were
// added (stop in reverse). Only the newest role counts: a quick
// lead-lose-lead becomes a stop and a start, or nothing if the duties never
// saw the loss.
//
// Thread-safety: add() before start(); role_changed() from any thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace etcdq::member {

class LeaderDuties {
 public:
  struct Duty {
    std::string name;  // for the log
    std::function<void()> start;
    std::function<void()> stop;
  };

  LeaderDuties() = default;
  ~LeaderDuties();  // stop()
  LeaderDuties(const LeaderDuties&) = delete;
  LeaderDuties& operator=(const LeaderDuties&) = delete;

  void add(Duty duty);
  void start();
  // Any thread; never blocks on the duties.
  void role_changed(bool leading);
  // Stops every duty that runs, then the thread. Idempotent.
  void stop();

 private:
  void run();

  std::vector<Duty> duties_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool want_leading_ = false;  // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  bool leading_ = false;       // this object's thread only
  std::thread thread_;
};

}  // namespace etcdq::member
