// The watch hub: which watcher gets which change, as etcd's watchableStore
// (server/mvcc/watchable_store.go) defines it, without ever making apply
// wait for a client.
//
// A watcher is *synced* when it has seen every revision up to the last one
// published. The apply thread hands every synced watcher its events itself
// (publish(), as etcd's notify does in the write's End), one batch per
// watcher for each publish() (an applied log entry: at full write speed
// tens of revisions), its revisions whole and in order, so they go out in
// one response (etcd's protocol allows several revisions a response: its
// unsynced watchers get up to watchBatchMaxRevs, and every client takes
// them): no queue and no thread between apply and the watch streams. Each event is serialized once
// (HubEvent), however many watchers get it; a sink copies those bytes into
// its stream's buffer and never waits (a full buffer refuses the batch). A
// watcher that starts in the past, whose stream has no room when a revision
// is published, or that existed when apply did not build the events, is
// *unsynced*: the catch-up thread reads its events from storage (the
// revlog, in revision order) and moves it back to synced under the hub lock
// once it has reached the last published revision — no gap, no duplicate at
// the seam. If its next revision has been compacted meanwhile it is
// canceled with the compaction revision, never skipped.
//
// Memory for a stuck client is bounded by its stream's send buffer (the
// sink's business): the hub itself keeps no events for unsynced watchers,
// and a catch-up step reads no more than the sink has room for.
//
// Thread-safety: all public methods are safe from any thread. Sinks are
// called with the hub lock held and must not block or call into the hub.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "etcd/api/mvccpb/kv.pb.h"

namespace etcdq::mvcc {

class Store;

// One change as the hub hands it to the watchers it matches: the event as
// applied (prev_kv set when the key had a live version before) and its
// serialization, made once however many watchers get it.
//
// Thread-safety: encode() is called once, by whoever built the event,
// before the event is shared; after that it is read-only.
class HubEvent {
 public:
  explicit HubEvent(mvccpb::Event&& ev) : ev_(std::move(ev)) {}
  const mvccpb::Event& event() const { return ev_; }
  int64_t revision() const { return ev_.kv().mod_revision(); }
  bool has_prev() const { return ev_.has_prev_kv(); }
  bool encoded() const { return encoded_; }
  void encode();
  // The serialized mvccpb.Event, with its prev_kv or without (a watcher
  // that did not ask for it). protobuf writes fields in number order and
  // prev_kv is the last, so the event without it is a prefix of the bytes.
  std::string_view bytes(bool with_prev) const {
    return std::string_view(bytes_).substr(0, with_prev ? bytes_.size() : without_prev_);
  }

 private:
  mvccpb::Event ev_;
  std::string bytes_;
  size_t without_prev_ = 0;
  bool encoded_ = false;
};

// One event of a batch: which one, and whether this watcher gets its prev_kv.
struct EventRef {
  const HubEvent* event;
  bool with_prev;
  std::string_view bytes() const { return event->bytes(with_prev); }
};

struct WatchBatch {
  int64_t watch_id = 0;
  int64_t revision = 0;  // for the response header: at least the last event's
  // Encoded, in revision order, each revision whole (one or several
  // revisions); valid during offer() only (a sink copies what it keeps).
  std::span<const EventRef> events;
  size_t bytes = 0;  // the sum of events' bytes()
  // Non-zero: the watcher is canceled; its next revision was compacted.
  int64_t compact_revision = 0;
  // Non-empty: the watcher is canceled for this reason (sent even when the
  // stream has no room: it is small and ends the watcher's traffic).
  std::string cancel_reason;
  // Whether the answers of the entry being applied wait until the stream
  // wrote these events (member/answer_gate.h): a put's watchers see its
  // event before the put is answered, as etcd's do. False for a queue's
  // deliveries, which are no etcd watch event: the produce's answer does
  // not wait for the consumer's stream (it starts writing first when it
  // was idle: run_deferring).
  bool holds_answers = true;
};

// One client stream's side of the hub.
class WatchSink {
 public:
  virtual ~WatchSink() = default;
  // Takes (copies) the batch if the stream has room; false leaves the
  // watcher to catch up from storage later. Never blocks.
  virtual bool offer(const WatchBatch& batch) = 0;
  // How many bytes of events (their encoded size) catching up may read for
  // this sink now; 0: none (wait until it drains, then call wake()). The
  // hub reads at most that much, but always a whole revision.
  virtual size_t room() const = 0;
  // Whether a write to the client has been under way for `d` or more (the
  // client reads nothing), so nothing queued on this sink reaches it: the
  // queue host drops consumers of such a sink (queue/host.h) even while it
  // still has room. False for a sink that writes nowhere.
  virtual bool write_stalled_for(std::chrono::steady_clock::duration d) const {
    (void)d;
    return false;
  }
};

struct WatchSpec {
  std::string key;
  std::string end;  // range.h's convention: "" single key, "\0" from key
  int64_t start_revision = 0;  // first revision wanted (> 0)
  bool prev_kv = false;
  bool no_put = false;
  bool no_delete = false;
  // Progress is not answered for this watcher while the hub's revision is
  // below it: the client's own start revision, 0 when it gave none (etcd's
  // `rev < w.startRev` in watchable_store.go progressIfSync).
  int64_t progress_from = 0;
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
  // Runs `fn(revision)` under the hub lock if watcher `watch_id` of `sink`
  // is synced and the hub's revision has reached its WatchSpec::progress_from,
  // with `revision` the last one published: a progress
  // response that fn queues on the stream then follows every event up to
  // that revision and precedes later ones, as etcd sends progress under
  // its store's lock (watchable_store.go, progress and progressAll).
  // Checking "synced" and reading the revision under two holds of the lock
  // would let a revision whose events went to catch-up in between be
  // claimed as delivered. fn may lock the sink (as offer() runs) but must
  // not block or call the hub. Returns whether fn ran.
  bool if_synced(WatchSink* sink, int64_t watch_id, const std::function<void(int64_t revision)>& fn) const;
  // The same for all the watchers of `sink` at once: fn runs only if `sink`
  // has at least one watcher and every one passes if_synced's test;
  // otherwise nothing runs and nothing is kept. This is etcd 3.6's answer
  // to a progress request (watchable_store.go progressAll/progressIfSync,
  // v3rpc/watch.go): a request made while a watcher catches up, or on a
  // stream without watchers, gets no answer, and the client asks again
  // (kube-apiserver's progress requester does, every 100 ms while it
  // waits). etcd 3.4 answered every request; 3.5.8 deferred it. Returns
  // whether fn ran.
  bool if_all_synced(WatchSink* sink, const std::function<void(int64_t revision)>& fn) const;
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

  // Apply thread, after the view at `revision` is published: hands the
  // events to the synced watchers they match (sinks copy them; nobody
  // waits for a client). `events` are in revision order; `complete` false
  // means apply did not build them (no watcher existed when the entry
  // started) and synced watchers must catch up from storage instead.
  // Before it returns, with no lock held, it runs what sinks deferred.
  void publish(std::vector<mvccpb::Event>&& events, bool complete, int64_t revision);

  // For a sink inside offer() on publish()'s thread: has `fn(arg, here)`
  // run on this thread at the end of publish(), once every watcher has its
  // events of the pass and the hub lock is released, so a stream that was
  // idle sends the whole pass in one response. `here` is true for the
  // first few streams of a publish() (watch_hub.cc, kMaxDeferred): fn
  // starts the write itself, without waking another thread (etcd's watch
  // stream sends from the apply goroutine's notify without a hand-off
  // either); false for the rest: past a few, starting writes would delay
  // apply (and the next proposals) more than a wake-up costs, so fn hands
  // the write to a thread of its own. Returns false (nothing deferred)
  // outside publish(). `arg` must stay valid until fn has run.
  static bool defer(void (*fn)(void* arg, bool here), void* arg);
  // Runs fn() with defer() working as inside publish(), then, on this
  // thread with whatever locks fn took released, what sinks deferred in
  // it. For a sink offered events outside publish() on the apply thread
  // (a queue's deliveries, queue/host.cc): an idle consumer's stream
  // starts writing its delivery there and then, as a watcher's does. Inside
  // publish() or another run_deferring(), fn's deferrals join the outer
  // list.
  static void run_deferring(const std::function<void()>& fn);

 private:
  struct Watcher;
  using Key = std::pair<WatchSink*, int64_t>;

  void run();
  // Offers a pass's events, events[0..n) in revision order, to the synced
  // watchers they match, one batch a watcher; returns whether a watcher
  // became unsynced. mu_ held.
  bool dispatch(HubEvent* events, size_t n, int64_t compact_revision);
  void catch_up(const std::shared_ptr<Watcher>& w);
  void make_synced(const std::shared_ptr<Watcher>& w);    // lock held
  bool progress_ok_locked(const Watcher& w) const;         // lock held
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
  // dispatch's scratch (mu_ held): the watchers one pass
  // matched, in first-match order, and the events each gets (a watcher's
  // slot is valid while its mark is the current epoch).
  uint64_t epoch_ = 0;
  std::vector<Watcher*> hit_;
  std::vector<std::vector<EventRef>> hit_events_;

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool woken_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace etcdq::mvcc
