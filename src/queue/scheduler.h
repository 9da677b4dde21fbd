// Who gets which message: decided in one place, the leader (QUEUES.md, "Any
// member"). Its scheduler thread hands each queue's messages to the live
// consumers round-robin, at most max_in_flight unacknowledged per consumer:
// redeliveries first (oldest idx first), then new messages in idx order.
// Each decision is a QueueAssign command through the log, so every member
// agrees on who holds what until when, and the member hosting the consumer
// delivers when it applies the decision.
//
// Most decisions need no command: the scheduler tells the log which
// consumers are live ("ready", a QueueAssign without assignments, once per
// consumer that comes or goes), and apply hands each new message to a
// ready consumer with room in the entry that produced it or freed the room
// (book.h, "fill"). What is left here: redeliveries, dead letters, and new
// messages for consumers not made ready yet.
//
// A message is handed out again when its holder is gone or its visibility
// timeout passed without an ack; after max_deliveries it is dead-lettered
// instead. Consumers on other members are known from their reports
// (Peer.QueueConsumers, every kReportEvery and on change): a consumer
// missing from its member's fresh report is gone. A member that has not
// reported for kReportStale (down, or cut off from the leader) gets no new
// messages, but what its consumers hold stays theirs until the visibility
// timeout: they may still be working on it.
//
// On a member that is not the leader the same thread reports this member's
// consumers to the leader. On every member it retries deliveries that a
// full stream could not take (host.h).
//
// Cost: a queue is looked at when an entry changed it, and every
// kFullPass all queues holding messages are (visibility timeouts, consumers
// gone); queues that are empty cost nothing.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "etcdq/command.pb.h"
#include "etcdq/peer.pb.h"
#include "queue/book.h"
#include "queue/host.h"

namespace etcdq::queue {

struct SchedulerOptions {
  uint64_t self = 0;  // this member's id
  // Proposes through the log; `done` once applied here or failed. Any thread.
  std::function<void(apply::Command, std::function<void(Error)>)> propose;
  // The leader's Peer target when it is another member, else "".
  std::function<std::string()> leader_target;
  // Sends this member's consumers to the leader; fire and forget.
  std::function<void(const std::string& target, const peer::QueueConsumersRequest&)> report;
  // Queues the scheduler leaves alone (the ClickHouse sink's).
  std::function<bool(std::string_view queue)> skip;
};

class Scheduler {
 public:
  Scheduler(Book* book, Host* host, SchedulerOptions opts);
  ~Scheduler();  // stop()

  void start();
  // Leader-only work (member/leader_duties.h): runs between
  // set_leading(true) and set_leading(false). Any thread.
  void set_leading(bool leading);
  void stop();
  // An applied entry changed these queues.
  void changed(std::vector<std::string>&& queues);
  // Leader: part `part` of `parts` of report `report` from member `member`
  // (the caller checked that `member` is in the cluster); once every part
  // arrived, `member` hosts exactly those consumers. Peer input is bounded:
  // a report of more than kMaxReportParts parts or kMaxReportedConsumers
  // consumers, or a part out of range, is dropped whole, and so is a report
  // whose parts do not all arrive within kReportStale.
  void reported(uint64_t member, uint64_t report, uint32_t part, uint32_t parts, std::vector<ConsumerRef> consumers);

  // Whether the consumer `instance` on `member` is still there as far as
  // this member knows: its own consumers, and on the leader the others'
  // fresh reports (a member not heard from counts as there). What the
  // in-flight metric counts (queue/metrics.h). Any thread.
  bool holder_alive(uint64_t member, uint64_t instance) const {
    std::lock_guard<std::mutex> lock(mu_);
    return alive(Holder{member, instance});
  }

  static constexpr uint32_t kMaxReportParts = 1024;
  static constexpr size_t kMaxReportedConsumers = 1 << 20;

  static constexpr std::chrono::milliseconds kTick{20};
  static constexpr std::chrono::seconds kReportEvery{1};
  static constexpr std::chrono::seconds kReportStale{3};
  static constexpr std::chrono::milliseconds kFullPass{200};
  static constexpr size_t kMaxAssignmentsPerCommand = 4096;
  static constexpr size_t kMaxReportPartBytes = 512 << 10;

 private:
  using Clock = std::chrono::steady_clock;
  struct Holder {
    uint64_t member = 0;
    uint64_t instance = 0;
    auto operator<=>(const Holder&) const = default;
  };
  struct Report {
    std::vector<ConsumerRef> consumers;
    Clock::time_point at;
  };
  // Leader-local bookkeeping of decisions proposed but not applied yet.
  struct Proposed {
    std::map<uint64_t, Holder> idx;  // decided, not applied
    uint64_t fresh_up_to = 0;        // new messages decided up to here
    bool ready_pending = false;      // a change of the ready consumers proposed, not applied
  };

  using Holders = std::map<std::string, std::vector<Holder>, std::less<>>;
  void run();
  void lead(int64_t now_ms, bool full);
  void schedule(const std::string& queue, const std::vector<Holder>& holders, int64_t now_ms);
  void report_if_due();
  bool alive(const Holder& h) const;  // mu_ held

  Book* book_;
  Host* host_;
  SchedulerOptions opts_;

  std::atomic<bool> role_leading_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
  bool stop_ = false;
  std::map<uint64_t, Report> reports_;  // leader: by member
  struct Partial {
    uint64_t report = 0;
    uint32_t parts = 0;
    std::set<uint32_t> received;  // part numbers
    std::vector<ConsumerRef> consumers;
    Clock::time_point started{};
  };
  std::map<uint64_t, Partial> partial_;  // leader: reports still arriving
  std::set<std::string, std::less<>> dirty_;  // changed since the last round
  bool full_ = true;                          // next round looks at every queue
  Clock::time_point last_full_{};
  uint64_t host_version_seen_ = ~0ULL;
  uint64_t next_report_ = 1;
  std::map<std::string, Proposed> proposed_;
  bool leading_ = false;
  Clock::time_point leading_since_{};
  size_t rotate_ = 0;
  uint64_t generation_ = 0;  // bumps when leadership comes or goes
  // follower: what was last reported, to whom and when
  uint64_t reported_version_ = ~0ULL;
  std::string reported_to_;
  Clock::time_point reported_at_{};
  std::thread thread_;
};

}  // namespace etcdq::queue
