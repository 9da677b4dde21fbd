// The ClickHouse sink (QUEUES.md): a queue named `ch:{table}` has no
// consumers; on the leader, its messages (each a JSON object) are inserted
// into ClickHouse table {table} of --clickhouse-db in batches, as
// JSONEachRow over ClickHouse's HTTP interface (--clickhouse-url). A batch's
// messages are deleted (through the log) only after ClickHouse accepted the
// batch. While ClickHouse is down or refuses, the messages stay queued and
// the batch is retried with backoff (kMinBackoff doubling to kMaxBackoff);
// the log says so when it starts and when it recovers, not per message. A
// message that is not a JSON object goes to the dead-letter queue with the
// reason.
//
// Delivery is at least once: if the leader fails after ClickHouse accepted
// a batch and before the batch's delete committed, the next leader inserts
// that batch again.
//
// Thread-safety: start/stop/wake from any thread; one thread of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/error.h"
#include "etcdq/command.pb.h"
#include "mvcc/store.h"
#include "queue/book.h"

namespace httplib {
class Client;
}

namespace etcdq::queue {

struct ClickHouseOptions {
  std::string url;                // "http://host:port"; "": not set up
  std::string database = "default";
  // Proposes through the log; `done` once applied here or failed. Any thread.
  std::function<void(apply::Command, std::function<void(Error)>)> propose;
};

class ClickHouseSink {
 public:
  ClickHouseSink(Book* book, mvcc::Store* store, ClickHouseOptions opts);
  ~ClickHouseSink();  // stop()

  void start();
  // Leader-only work (member/leader_duties.h): runs between
  // set_leading(true) and set_leading(false). Any thread.
  void set_leading(bool leading);
  void stop();
  void wake();

  static constexpr size_t kMaxBatchRows = 1000;
  static constexpr size_t kMaxBatchBytes = 4 << 20;
  static constexpr std::chrono::milliseconds kMinBackoff{200};
  static constexpr std::chrono::milliseconds kMaxBackoff{10000};
  // An insert that gets no answer for this long is retried (a ClickHouse
  // that accepts connections and never answers must not stall the queue).
  static constexpr std::chrono::seconds kInsertTimeout{10};

 private:
  void run();
  // One batch of `queue`; true when something was inserted or dead-lettered.
  bool drain(const std::string& queue, std::string_view table);
  Error insert(std::string_view table, const std::string& rows);
  Error propose_and_wait(apply::Command cmd);

  Book* book_;
  mvcc::Store* store_;
  ClickHouseOptions opts_;
  std::atomic<bool> role_leading_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  httplib::Client* active_ = nullptr;  // the insert in progress, stopped by stop()
  bool woken_ = false;
  bool stop_ = false;
  std::set<std::string> told_not_set_up_;
  std::map<std::string, std::chrono::steady_clock::time_point> retry_at_;
  std::map<std::string, std::chrono::milliseconds> backoff_;
  std::thread thread_;
};

}  // namespace etcdq::queue
