// The replicated state of every queue (QUEUES.md): counters, settings and
// one record per message, written by apply in the entry's own RocksDB batch
// (meta column family, "queue/{queue}/..."), plus an in-memory mirror of
// what the scheduler needs: each non-empty (or configured) queue's counters,
// settings, and the records of messages handed out at least once (idx <=
// cursor; bounded by what consumers hold, not by the backlog).
//
// Apply side (the apply thread, inside a mvcc::Writer txn):
//   produce   Put /q/{queue}/p/{tail}: the message gets the queue's next idx
//             and is stored at /q/{queue}/{idx}/{tail} (an ordinary key:
//             ranges and watches see it);
//   deleted   a key under /q/ was deleted (ack, lease expiry, prefix delete);
//   assign    the leader's QueueAssign: which consumers are ready,
//             deliveries and dead letters;
//   config    /q/{queue}/config was put or deleted.
// At the end of an entry (before_commit) "fill" hands the queue's new
// messages (idx > cursor, in idx order) to its ready consumers that hold
// fewer than max_in_flight, when the entry produced messages or freed room
// (an ack) and no handed-out message is due again (those go first, by the
// leader's scheduler). The consumer is picked from replicated state only
// (ready consumers sorted, starting at idx mod their count), and the
// visibility deadline is the entry's latest command time plus the
// timeout, so every member decides alike. A delivery thus needs no log
// command of its own and goes out when its produce is applied (issue #37).
// After the entry is committed, committed() hands this member's deliveries
// to the deliver callback and wakes the changed callback (never blocks).
//
// Thread-safety: apply-side calls from the apply thread only; the readers
// (queues, view, oldest_produced_ms) from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "etcd/api/mvccpb/kv.pb.h"
#include "etcdq/command.pb.h"
#include "mvcc/writer.h"
#include "queue/config.h"
#include "storage/engine.h"

namespace etcdq::queue {

// A message this member must hand to one of its consumers.
struct Delivery {
  uint64_t instance = 0;
  std::string queue;
  mvccpb::KeyValue kv;  // the message, key /q/{queue}/{idx}/{tail}
  int64_t revision = 0;  // the store's revision once the entry is applied
};

// A consumer that takes new messages at apply (QueueAssign.ready).
struct ReadyConsumer {
  uint64_t member = 0;
  uint64_t instance = 0;
  auto operator<=>(const ReadyConsumer&) const = default;
};

// One queue as the scheduler sees it: a copy.
struct QueueView {
  std::string name;
  Config config;
  apply::QueueCounters counters;
  std::map<uint64_t, apply::QueueMessage> handed_out;  // idx <= cursor, still in the queue
  std::vector<ReadyConsumer> ready;                    // sorted
};

class Book {
 public:
  explicit Book(storage::Engine* engine);
  // This member's id: assignments to it are delivered here.
  void set_self(uint64_t member_id) { self_ = member_id; }
  void set_deliver(std::function<void(std::vector<Delivery>&&)> fn) { deliver_ = std::move(fn); }
  // Consumers of this member whose messages the leader handed to others
  // before their visibility timeout ended (it lost track of them, e.g.
  // this member was cut off): they must be told.
  void set_revoke(std::function<void(std::vector<uint64_t>&&)> fn) { revoke_ = std::move(fn); }
  // After an entry that changed queues: their names.
  void set_changed(std::function<void(std::vector<std::string>&&)> fn) { changed_ = std::move(fn); }

  // Reloads the mirror from the database (start, snapshot restore).
  void reload();

  // --- apply thread ---
  // Each entry starts with this (no command time known yet).
  void begin_entry();
  // A command of this entry was proposed at `time_ms` (its proposer's
  // clock): fill's deadlines come from the latest.
  void command_time(int64_t time_ms);
  void produce(mvcc::Writer& w, std::string_view queue, std::string_view tail, std::string_view value,
               int64_t lease, int64_t time_ms);
  void deleted(mvcc::Writer& w, std::string_view key);
  void config_put(mvcc::Writer& w, std::string_view queue, std::string_view value);
  void assign(mvcc::Writer& w, const apply::QueueAssign& a, int64_t time_ms);
  // Writes the counters of the queues this entry changed (once each).
  void before_commit(mvcc::Writer& w);
  void committed(int64_t revision);

  // --- any thread ---
  std::vector<std::string> queues() const;
  // The queues that hold messages now.
  std::vector<std::string> nonempty_queues() const;
  bool view(std::string_view queue, QueueView* out) const;
  // When the oldest message still queued was produced (Unix ms), 0: none.
  int64_t oldest_produced_ms(std::string_view queue) const;

 private:
  struct Queue {
    Config config;
    bool has_config = false;  // /q/{queue}/config exists
    apply::QueueCounters counters;
    std::map<uint64_t, apply::QueueMessage> handed_out;
    std::vector<ReadyConsumer> ready;         // sorted, unique
    std::map<ReadyConsumer, uint32_t> holds;  // handed_out by holder (member != 0)
    // An empty queue without a config or ready consumers is dropped from
    // the mirror after its entry (its records stay in the database): a
    // million queues used once cost no memory, scheduling or metrics lines.
    bool idle() const { return counters.depth() == 0 && handed_out.empty() && !has_config && ready.empty(); }
    void hold(uint64_t idx, const apply::QueueMessage& m);  // handed_out[idx] = m
    void unhold(uint64_t idx);                              // erases handed_out[idx]
  };
  // The queue, loaded from the database (through `w`) if it is not in the
  // mirror, or new. mu_ held.
  Queue& queue_locked(mvcc::Writer& w, std::string_view name);
  void save_counters(std::string_view name);  // mu_ held
  void dead_letter(mvcc::Writer& w, std::string_view name, uint64_t idx, const apply::QueueMessage& m,
                   const std::string& reason, int64_t time_ms);
  // Hands message `idx` (delivered `deliveries` times so far) to `to`
  // (member 0: dead-letters it); false if the message is gone or was
  // delivered another number of times (a stale decision).
  bool hand_out(mvcc::Writer& w, const std::string& name, uint64_t idx, uint32_t deliveries, ReadyConsumer to,
                int64_t deadline_ms, const std::string& reason, int64_t time_ms);
  void set_ready(mvcc::Writer& w, const std::string& name, const apply::QueueAssign& a);
  void fill(mvcc::Writer& w, const std::string& name);

  // What produce wrote of a message that was not handed out yet: its first
  // assignment, usually a few milliseconds later, takes the record and the
  // key-value from here rather than reading both back from the database
  // (the apply thread's two lookups a message).
  struct Fresh {
    apply::QueueMessage record;
    mvccpb::KeyValue kv;
    size_t bytes = 0;
  };
  using FreshMap = std::unordered_map<std::string, Fresh>;
  void remember_fresh(std::string meta_key, const apply::QueueMessage& m, mvccpb::KeyValue&& kv);
  void erase_fresh(FreshMap::iterator it);  // keeps fresh_bytes_ in step

  storage::Engine* engine_;
  uint64_t self_ = 0;
  std::function<void(std::vector<Delivery>&&)> deliver_;
  std::function<void(std::vector<uint64_t>&&)> revoke_;
  std::function<void(std::vector<std::string>&&)> changed_;
  mutable std::mutex mu_;  // guards queues_
  std::map<std::string, Queue, std::less<>> queues_;
  std::set<std::string, std::less<>> nonempty_;  // depth > 0
  // apply thread only
  // By message_meta_key; holds exactly the records the database holds for
  // those keys (cleared by reload). Bounded: past kFreshMaxBytes a message
  // is not remembered and its assignment reads the database, as after a
  // restart.
  FreshMap fresh_;
  size_t fresh_bytes_ = 0;
  static constexpr size_t kFreshMaxBytes = 64 << 20;
  std::vector<Delivery> pending_;
  std::vector<uint64_t> revoked_;
  std::set<std::string, std::less<>> dirty_queues_;    // counters to write
  std::set<std::string, std::less<>> changed_queues_;  // to tell the scheduler
  std::set<std::string, std::less<>> fill_queues_;     // produced into or acked in this entry
  int64_t entry_time_ms_ = 0;                          // latest command time of this entry, 0: none
  bool dirty_ = false;
  bool dead_lettering_ = false;
  // restore_base_key(): the apply thread's copy (reload).
  bool restore_pending_ = false;
  uint64_t restore_base_ = 0;
};

// Meta column family keys.
std::string counters_key(std::string_view queue);
// Written by a restore (queue/rebuild.h): "pending", and then, by the first
// produce to a `ch:` queue, the decimal idx below which no later produce to
// a ch: queue goes (that entry's time in Unix microseconds). A restored
// cluster's history forks from the one that went on after the backup, whose
// ch: queues already put idx beyond the backup's into ClickHouse; a ch:
// queue's idx name its rows there (queue/clickhouse.h), so they must not be
// used again. Taken from the entry, not the restore's clock, so that every
// member (each restored on its own) assigns the same idx. Holds while no
// ch: queue took more than a million messages a second on average.
std::string restore_base_key();
std::string config_meta_key(std::string_view queue);
std::string message_meta_key(std::string_view queue, uint64_t idx);
// A ready consumer's record: sorts before the queue's message records.
std::string ready_meta_key(std::string_view queue, ReadyConsumer c);

}  // namespace etcdq::queue
