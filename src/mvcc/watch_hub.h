// The watch hub: which watcher gets which change, as etcd's watchableStore
// (server/mvcc/watchable_store.go) defines it, without ever making apply
// wait for a client.
//
// A watcher is *synced* when it has seen every revision up to the last one
// dispatched: apply queues each committed entry's events (it never waits for
// delivery), and the hub's dispatch thread hands every synced watcher its
// events, one batch per revision, so a revision's events arrive together.
// If the queue grows past kMaxQueuedEvents or kMaxQueuedBytes (of keys and
// values: big values make a few events weigh a lot) the hub drops it and every synced
// watcher catches up from storage instead: memory stays bounded. A watcher that
// starts in the past, or whose stream has no room when a revision is
// published, is *unsynced*: the catch-up thread reads its events from
// storage (the revlog, in revision order) and moves it back to synced
// under the hub lock once it has reached the last published revision — no
// gap, no duplicate at the seam. If its next revision has been compacted
// meanwhile it is canceled with the compaction revision, never skipped.
//
// Memory for a stuck client is bounded by its stream's send buffer (the
// sink's business): the hub itself keeps no events for unsynced watchers,
// and a catch-up step reads no more than the sink has room for.
//
// Thread-safety: all public methods are safe from any thread. Sinks are
// called with the hub lock held and must not block or call into the hub.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "etcd/api/mvccpb/kv.pb.h"

namespace etcdq::mvcc {

class Store;

struct WatchBatch {
  int64_t watch_id = 0;
  int64_t revision = 0;  // for the response header
  std::vector<mvccpb::Event> events;
  // Non-zero: the watcher is canceled; its next revision was compacted.
  int64_t compact_revision = 0;
  // Non-empty: the watcher is canceled for this reason (sent even when the
  // stream has no room: it is small and ends the watcher's traffic).
  std::string cancel_reason;
};

// One client stream's side of the hub.
class WatchSink {
 public:
  virtual ~WatchSink() = default;
  // Takes the batch if the stream has room; false leaves the watcher to
  // catch up from storage later.
  virtual bool offer(WatchBatch&& batch) = 0;
  // How many bytes of events (their encoded size) catching up may read for
  // this sink now; 0: none (wait until it drains). The hub reads at most
  // that much, but always a whole revision.
  virtual size_t room() const = 0;
  // Whether offer() would take a batch of events of this encoded size now
  // (the hub asks before it copies them).
  virtual bool fits(size_t /*bytes*/) const { return true; }
};

struct WatchSpec {
  std::string key;
  std::string end;  // range.h's convention: "" single key, "\0" from key
  int64_t start_revision = 0;  // first revision wanted (> 0)
  bool prev_kv = false;
  bool no_put = false;
  bool no_delete = false;
};

class WatchHub {
 public:
  explicit WatchHub(Store* store);
  ~WatchHub();  // stops the catch-up thread

  // Registers watcher `watch_id` of `sink`. Revisions below
  // spec.start_revision are not delivered.
  void add(WatchSink* sink, int64_t watch_id, const WatchSpec& spec);
  // Returns whether it existed. After it returns, `sink` is not called for it.
  bool remove(WatchSink* sink, int64_t watch_id);
  void remove_all(WatchSink* sink);
  // Every watcher of `sink` is synced (etcd answers a progress request then).
  bool all_synced(WatchSink* sink) const;
  bool is_synced(WatchSink* sink, int64_t watch_id) const;
  // The last revision whose events were handed to synced watchers.
  int64_t revision() const;
  // Any watchers at all (apply skips building events when none).
  bool active() const { return count_.load(std::memory_order_relaxed) > 0; }
  // A sink has room again: unsynced watchers may catch up.
  void wake();

  // For /metrics (etcd's watcher gauges): watchers, watchers not synced
  // (etcd's slow watchers: catching up from storage or parked), and
  // distinct sinks (watch streams) that hold at least one watcher. Any
  // thread; the last two take the hub's lock briefly.
  int64_t watchers() const { return count_.load(std::memory_order_relaxed); }
  int64_t slow_watchers() const;
  int64_t streams() const;

  // Apply thread, after the view at `revision` is published; never waits
  // for delivery. `events` are in revision order; `complete` false means
  // apply did not build them (no watcher existed when the entry started) and
  // synced watchers must catch up from storage instead.
  void publish(std::vector<mvccpb::Event>&& events, bool complete, int64_t revision);

  static constexpr size_t kMaxQueuedEvents = 200000;
  static constexpr size_t kMaxQueuedBytes = 64 << 20;

 private:
  struct Watcher;
  using Key = std::pair<WatchSink*, int64_t>;

  struct Published {
    std::vector<mvccpb::Event> events;
    bool complete;
    int64_t revision;
    size_t bytes = 0;  // keys and values of `events`
  };
  void run();
  void dispatch_loop();
  void dispatch(Published&& p);
  void catch_up(const std::shared_ptr<Watcher>& w);
  void make_synced(const std::shared_ptr<Watcher>& w);    // lock held
  void make_unsynced(Watcher* w, int64_t next_rev);         // lock held
  void unlink_synced(Watcher* w);                           // lock held

  Store* store_;
  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<Watcher>> all_;
  std::unordered_map<std::string, std::vector<Watcher*>> synced_keys_;  // single-key watchers
  // Range watchers grouped by their range: an event is matched against each
  // distinct range once (clients tend to share a few prefixes).
  std::map<std::pair<std::string, std::string>, std::vector<Watcher*>> synced_ranges_;
  std::map<Key, std::shared_ptr<Watcher>> unsynced_;
  int64_t revision_ = 0;
  std::atomic<int64_t> count_{0};

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool woken_ = false;
  bool stop_ = false;
  std::thread thread_;

  std::mutex queue_mu_;  // guards queue_, queued_events_, queued_bytes_, dispatch_stop_
  std::condition_variable queue_cv_;
  std::deque<Published> queue_;
  size_t queued_events_ = 0;
  size_t queued_bytes_ = 0;
  bool dispatch_stop_ = false;
  std::thread dispatch_thread_;
};

}  // namespace etcdq::mvcc
