// The ClickHouse sink (QUEUES.md): a queue named `ch:{table}` has no
// consumers; on the leader, its messages (each a JSON object) are inserted
// into ClickHouse table {table} of --clickhouse-db in batches, as
// JSONEachRow over ClickHouse's HTTP interface (--clickhouse-url). A batch's
// messages are deleted (through the log) only after ClickHouse accepted the
// batch. While ClickHouse is down or refuses, the messages stay queued and
// the batch is retried with backoff (kMinBackoff doubling to kMaxBackoff).
// A message that is not a JSON object, or that has a field named
// kQueueColumn or kIdxColumn, goes to the dead-letter queue with the reason.
//
// Exactly once: each row carries its queue and idx (the object gets the
// fields kQueueColumn and kIdxColumn in front; the table must have those
// columns, String and UInt64). A leader that has not inserted into a queue
// yet, or whose last request for it had no certain outcome, first asks
// ClickHouse for the highest idx it holds for that queue (H). Messages above
// H are inserted; a message at or below H (a batch a deposed or killed
// leader inserted and did not delete, or a restored backup's messages) is
// looked up by idx and only inserted if ClickHouse does not have it. Then
// the batch is deleted. Idx are never reused for a ch: queue, also across
// `etcdq snapshot restore` (queue/rebuild.h). The sink assumes it is the only
// writer of etcdq rows of its queues (one etcdq cluster per table and queue)
// and that a deposed leader stops inserting before the next one starts: a
// leader cut off from its peers but not from ClickHouse may insert one batch
// within the election timeout after the next leader took over; an insert
// whose answer was lost is asked about again only after kInsertTimeout more,
// so a ClickHouse that needs longer than twice that to finish an insert it
// already dropped the answer to may get it twice.
//
// Logs: whether ClickHouse answers, once at start and on each change (one
// line, not one per queue or message); why a queue's batch was refused, once
// until it is taken.
//
// Thread-safety: start/stop/wake/set_leading from any thread; one thread of
// its own does everything else.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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
  static constexpr std::string_view kQueueColumn = "etcdq_queue";
  static constexpr std::string_view kIdxColumn = "etcdq_idx";

 private:
  void run();
  // One batch of `queue`; true when something was inserted or dead-lettered.
  bool drain(const std::string& queue, std::string_view table);
  // POSTs `body` to ClickHouse with `query` (URL parameter, may be empty);
  // the answer's body in `out`. Unavailable when it did not answer or
  // answered an error (its message), which is logged here when ClickHouse
  // stops or starts answering.
  Error request(const std::string& query, const std::string& body, std::string* out);
  // The highest idx of `queue` ClickHouse holds (0: none).
  Error highest_idx(std::string_view table, const std::string& queue, uint64_t* out);
  // Which of `idx` ClickHouse holds for `queue`.
  Error held_idx(std::string_view table, const std::string& queue, const std::vector<uint64_t>& idx,
                 std::set<uint64_t>* out);
  void refused(const std::string& queue, size_t rows, const Error& e);
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
  std::set<std::string> told_refused_;  // sink thread only
  // Sink thread only. Per queue, the highest idx ClickHouse is known to
  // hold, learnt since this member last became leader; a queue not here is
  // asked first. Cleared when leadership changes (leading_epoch_).
  std::map<std::string, uint64_t> known_high_;
  std::atomic<uint64_t> leading_epoch_{0};
  uint64_t seen_epoch_ = 0;
  enum class Reach { kUnknown, kAnswers, kSilent };
  Reach reach_ = Reach::kUnknown;
  bool last_uncertain_ = false;  // the last request was sent and got no answer
  std::map<std::string, std::chrono::steady_clock::time_point> retry_at_;
  std::map<std::string, std::chrono::milliseconds> backoff_;
  std::thread thread_;
};

}  // namespace etcdq::queue
