// etcd's monitorLeader (server/etcdserver/api/v3rpc/interceptor.go): a
// stream whose client asked for a leader ("hasleader: true" metadata,
// clientv3's WithRequireLeader; kube-apiserver's watches do) must not stay
// open and silent on a member cut off from its quorum. Every election
// timeout the monitor looks whether this member knows a leader; once it has
// known none for kNoLeaderTicks timeouts in a row (etcd's maxNoLeaderCnt),
// and at every timeout after that until a leader is known again, it runs
// `on_lost`, which ends such streams with Unavailable "etcdserver: no
// leader" (clients open them again, on another member if they can). New
// streams are refused at their start meanwhile (call_rules.h).
//
// Thread-safety: one thread of its own runs `has_leader` and `on_lost`;
// the destructor stops and joins it (so `on_lost` never runs after).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace etcdq::server {

class LeaderMonitor {
 public:
  static constexpr int kNoLeaderTicks = 3;

  // `election_timeout` > 0: how often it looks (etcd: TickMs x ElectionTicks).
  LeaderMonitor(std::chrono::milliseconds election_timeout, std::function<bool()> has_leader,
                std::function<void()> on_lost);
  ~LeaderMonitor();
  LeaderMonitor(const LeaderMonitor&) = delete;
  LeaderMonitor& operator=(const LeaderMonitor&) = delete;

 private:
  void run();

  const std::chrono::milliseconds tick_;
  const std::function<bool()> has_leader_;
  const std::function<void()> on_lost_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;     // last: started once the rest is set
};

}  // namespace etcdq::server
