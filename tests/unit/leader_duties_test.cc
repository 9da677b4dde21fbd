// Leader-only work follows leadership (member/leader_duties.h): duties start
// in order when this member leads, stop in reverse when it stops, only the
// newest role counts, and stop() ends whatever runs.
#include "member/leader_duties.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace etcdq::member {
namespace {

struct Log {
  std::mutex mu;
  std::vector<std::string> events;
  void add(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mu);
    return events;
  }
  // Waits until `n` events were logged (or 5 s).
  std::vector<std::string> wait(size_t n) {
    for (int i = 0; i < 500 && get().size() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return get();
  }
};

void add_duties(LeaderDuties& d, Log& log) {
  for (std::string name : {"a", "b"}) {
    d.add({name, [&log, name] { log.add("start " + name); }, [&log, name] { log.add("stop " + name); }});
  }
}

TEST(LeaderDuties, StartInOrderWhenLeadingAndStopInReverseWhenNot) {
  Log log;
  LeaderDuties d;
  add_duties(d, log);
  d.start();
  d.role_changed(true);
  EXPECT_EQ(log.wait(2), (std::vector<std::string>{"start a", "start b"}));
  d.role_changed(false);
  EXPECT_EQ(log.wait(4), (std::vector<std::string>{"start a", "start b", "stop b", "stop a"}));
  d.stop();
  EXPECT_EQ(log.get().size(), 4u);
}

TEST(LeaderDuties, RoleChangedBeforeStartIsAppliedAtStart) {
  Log log;
  LeaderDuties d;
  add_duties(d, log);
  d.role_changed(true);
  d.start();
  EXPECT_EQ(log.wait(2), (std::vector<std::string>{"start a", "start b"}));
}

TEST(LeaderDuties, StopEndsRunningDutiesAndAFollowerStartsNothing) {
  Log log;
  {
    LeaderDuties d;
    add_duties(d, log);
    d.start();
    d.role_changed(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(log.get().empty());
    d.role_changed(true);
    log.wait(2);
  }  // the destructor stops
  EXPECT_EQ(log.get(), (std::vector<std::string>{"start a", "start b", "stop b", "stop a"}));
}

}  // namespace
}  // namespace etcdq::member
