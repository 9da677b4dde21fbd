#include "mvcc/watch_hub.h"

#include <algorithm>

#include <google/protobuf/io/coded_stream.h>

#include "mvcc/event_log.h"
#include "mvcc/range.h"
#include "mvcc/store.h"

namespace etcdq::mvcc {
namespace {
// Events read from storage per catch-up step of one watcher: bounds the
// memory and the time one step holds.
constexpr size_t kCatchUpEvents = 1000;
constexpr auto kCatchUpInterval = std::chrono::milliseconds(20);

// Streams whose first write the publishing thread starts itself per
// publish() (WatchHub::defer); the rest are handed to their own threads.
constexpr size_t kMaxDeferred = 4;

// WatchHub::defer's list: set while this thread dispatches in publish().
struct Deferred {
  void (*fn)(void*, bool);
  void* arg;
};
thread_local std::vector<Deferred>* t_deferred = nullptr;
}  // namespace

bool WatchHub::defer(void (*fn)(void*, bool), void* arg) {
  if (t_deferred == nullptr) return false;
  t_deferred->push_back(Deferred{fn, arg});
  return true;
}

void WatchHub::run_deferring(const std::function<void()>& fn) {
  if (t_deferred != nullptr) {
    fn();
    return;
  }
  std::vector<Deferred> deferred;
  deferred.reserve(kMaxDeferred);
  t_deferred = &deferred;
  fn();
  t_deferred = nullptr;
  for (size_t i = 0; i < deferred.size(); ++i) deferred[i].fn(deferred[i].arg, i < kMaxDeferred);
}

void HubEvent::encode() {
  if (encoded_) return;
  ev_.SerializeToString(&bytes_);
  without_prev_ = bytes_.size();
  if (ev_.has_prev_kv()) {
    // prev_kv (field 3) is written last: its tag, length and message end the bytes.
    size_t n = ev_.prev_kv().GetCachedSize();
    without_prev_ -= std::min(without_prev_, 1 + google::protobuf::io::CodedOutputStream::VarintSize64(n) + n);
  }
  encoded_ = true;
}

struct WatchHub::Watcher {
  WatchSink* sink;
  int64_t id;
  WatchSpec spec;
  // Unsynced: the first revision not yet delivered. Synced: revisions
  // below it are not delivered (a start revision in the future).
  int64_t next_rev;
  bool synced = false;
  bool removed = false;

  // dispatch's scratch: `slot` in hit_ is valid while mark == epoch_.
  uint64_t mark = 0;
  size_t slot = 0;

  bool wants(std::string_view key) const { return in_range(key, spec.key, spec.end); }
  bool passes(const mvccpb::Event& ev) const {
    return !(ev.type() == mvccpb::Event::PUT && spec.no_put) && !(ev.type() == mvccpb::Event::DELETE && spec.no_delete);
  }
};

WatchHub::WatchHub(Store* store)
    : store_(store), revision_(store->view()->revision()), thread_([this] { run(); }) {}

WatchHub::~WatchHub() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  thread_.join();
}

void WatchHub::add(WatchSink* sink, int64_t watch_id, const WatchSpec& spec) {
  auto w = std::make_shared<Watcher>();
  w->sink = sink;
  w->id = watch_id;
  w->spec = spec;
  w->next_rev = spec.start_revision;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all_[{sink, watch_id}] = w;
    count_.fetch_add(1, std::memory_order_relaxed);
    if (w->next_rev > revision_) {
      make_synced(w);
      return;
    }
    unsynced_[{sink, watch_id}] = w;
  }
  wake();
}

bool WatchHub::remove(WatchSink* sink, int64_t watch_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = all_.find({sink, watch_id});
  if (it == all_.end()) return false;
  Watcher* w = it->second.get();
  w->removed = true;
  if (w->synced) unlink_synced(w);
  unsynced_.erase({sink, watch_id});
  all_.erase(it);
  count_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void WatchHub::remove_all(WatchSink* sink) {
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = all_.lower_bound({sink, INT64_MIN}); it != all_.end() && it->first.first == sink; ++it) {
      ids.push_back(it->first.second);
    }
  }
  for (int64_t id : ids) remove(sink, id);
}

bool WatchHub::progress_ok_locked(const Watcher& w) const {
  return w.synced && revision_ >= w.spec.progress_from;
}

bool WatchHub::if_synced(WatchSink* sink, int64_t watch_id, const std::function<void(int64_t)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = all_.find({sink, watch_id});
  if (it == all_.end() || !progress_ok_locked(*it->second)) return false;
  fn(revision_);
  return true;
}

bool WatchHub::if_all_synced(WatchSink* sink, const std::function<void(int64_t)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = all_.lower_bound({sink, INT64_MIN});
  if (it == all_.end() || it->first.first != sink) return false;  // no watcher: no answer, as etcd 3.6
  for (; it != all_.end() && it->first.first == sink; ++it) {
    if (!progress_ok_locked(*it->second)) return false;
  }
  fn(revision_);
  return true;
}

int64_t WatchHub::revision() const {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

void WatchHub::wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_one();
}

void WatchHub::make_synced(const std::shared_ptr<Watcher>& w) {
  w->synced = true;
  unsynced_.erase({w->sink, w->id});
  if (w->spec.end.empty()) {
    synced_keys_[w->spec.key].push_back(w.get());
  } else {
    synced_ranges_[{w->spec.key, w->spec.end}].push_back(w.get());
  }
}

void WatchHub::unlink_synced(Watcher* w) {
  w->synced = false;
  if (w->spec.end.empty()) {
    auto it = synced_keys_.find(w->spec.key);
    if (it != synced_keys_.end()) {
      auto& v = it->second;
      v.erase(std::remove(v.begin(), v.end(), w), v.end());
      if (v.empty()) synced_keys_.erase(it);
    }
  } else {
    auto it = synced_ranges_.find({w->spec.key, w->spec.end});
    if (it != synced_ranges_.end()) {
      auto& v = it->second;
      v.erase(std::remove(v.begin(), v.end(), w), v.end());
      if (v.empty()) synced_ranges_.erase(it);
    }
  }
}

void WatchHub::make_unsynced(Watcher* w, int64_t next_rev) {
  unlink_synced(w);
  w->next_rev = std::max(w->next_rev, next_rev);
  auto it = all_.find({w->sink, w->id});
  if (it != all_.end()) unsynced_[it->first] = it->second;
}

void WatchHub::publish(std::vector<mvccpb::Event>&& events, bool complete, int64_t revision) {
  // Events are wrapped (moved, not copied) outside the lock; each is
  // encoded once, by the first watcher it matches.
  std::vector<HubEvent> hub_events;
  if (complete) {
    hub_events.reserve(events.size());
    for (auto& ev : events) hub_events.emplace_back(std::move(ev));
  }
  int64_t compact = store_->view()->compact_revision();
  bool lagging = false;
  std::vector<Deferred> deferred;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t_deferred = &deferred;
    int64_t first = revision_ + 1;
    revision_ = revision;
    if (!complete) {
      std::vector<Watcher*> synced;
      for (auto& [k, w] : all_) {
        if (w->synced) synced.push_back(w.get());
      }
      for (Watcher* w : synced) make_unsynced(w, first);
      lagging = !synced.empty();
    } else if (!hub_events.empty()) {
      lagging = dispatch(hub_events.data(), hub_events.size(), compact);
    }
    t_deferred = nullptr;
  }
  // Every stream this pass made ready starts its write only now, with all
  // of the pass's events queued: a writer thread that started one earlier
  // would send the pass in pieces.
  for (size_t i = 0; i < deferred.size(); ++i) deferred[i].fn(deferred[i].arg, i < kMaxDeferred);
  // Only a watcher that fell behind just now needs the catch-up thread:
  // one already behind is driven by its sink's wake() and the thread's own
  // interval, not by every revision published.
  if (lagging) wake();
}

bool WatchHub::dispatch(HubEvent* events, size_t n, int64_t compact_revision) {
  ++epoch_;
  hit_.clear();
  int64_t rev = 0;
  bool prev_readable = false;
  auto consider = [&](Watcher* w, HubEvent& ev) {
    if (!w->synced || rev < w->next_rev) return;
    if (!w->passes(ev.event())) return;
    if (w->mark != epoch_) {
      w->mark = epoch_;
      w->slot = hit_.size();
      hit_.push_back(w);
      if (hit_events_.size() < hit_.size()) hit_events_.emplace_back();
      hit_events_[w->slot].clear();
    }
    ev.encode();
    hit_events_[w->slot].push_back(EventRef{&ev, w->spec.prev_kv && prev_readable && ev.has_prev()});
  };
  for (size_t k = 0; k < n; ++k) {
    HubEvent& ev = events[k];
    rev = ev.revision();
    // etcd reads prev_kv at mod_revision - 1 when it sends the event, and
    // sends none when that is below the compaction (v3rpc/watch.go).
    prev_readable = rev - 1 >= compact_revision;
    const std::string& key = ev.event().kv().key();
    if (auto it = synced_keys_.find(key); it != synced_keys_.end()) {
      for (Watcher* w : it->second) consider(w, ev);
    }
    for (auto& [range, ws] : synced_ranges_) {
      if (!in_range(key, range.first, range.second)) continue;
      for (Watcher* w : ws) consider(w, ev);
    }
  }
  // One batch a watcher for the whole pass, its revisions in order: the
  // stream queues it as one response (watch_outbox.h), where one batch a
  // revision could be split by a write starting in between.
  bool lagging = false;
  WatchBatch batch;
  for (size_t h = 0; h < hit_.size(); ++h) {
    Watcher* w = hit_[h];
    const auto& refs = hit_events_[h];
    batch.watch_id = w->id;
    batch.revision = refs.back().event->revision();
    batch.events = std::span<const EventRef>(refs);
    batch.bytes = 0;
    for (const auto& r : refs) batch.bytes += r.bytes().size();
    if (!w->sink->offer(batch)) {
      make_unsynced(w, refs.front().event->revision());
      lagging = true;
    }
  }
  return lagging;
}

void WatchHub::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_cv_.wait_for(lock, kCatchUpInterval, [this] { return stop_ || woken_; });
      if (stop_) return;
      woken_ = false;
    }
    std::vector<std::shared_ptr<Watcher>> todo;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [k, w] : unsynced_) todo.push_back(w);
    }
    for (auto& w : todo) catch_up(w);
  }
}

void WatchHub::catch_up(const std::shared_ptr<Watcher>& w) {
  size_t room;
  int64_t published;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (w->removed || w->synced) return;
    room = w->sink->room();
    if (room == 0) return;
    published = revision_;
  }
  auto view = store_->view();
  // Not past what publish() has handed the synced watchers: apply makes a
  // revision readable just before it publishes it, and a watcher that
  // caught up into that gap would be ahead of the others on its stream, so
  // that no one revision could be the stream's progress (a progress answer
  // claimed R after the stream had sent R+1).
  int64_t to = std::min(view->revision(), published);
  WatchBatch batch;
  batch.watch_id = w->id;
  batch.revision = to;
  int64_t from = w->next_rev;  // only this thread changes an unsynced watcher's next_rev
  if (from < view->compact_revision()) {
    // The revisions it needs are gone: cancel it with the watermark so the
    // client can resume from there (etcd's chooseAll/compacted path).
    batch.compact_revision = view->compact_revision();
    std::lock_guard<std::mutex> lock(mu_);
    if (w->removed || !w->sink->offer(batch)) return;
    w->removed = true;
    unsynced_.erase({w->sink, w->id});
    all_.erase({w->sink, w->id});
    count_.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  int64_t last = from - 1;
  std::vector<HubEvent> events;
  std::vector<EventRef> refs;
  if (from <= to) {
    std::vector<mvccpb::Event> read;
    last = read_events(*view, from, to, kCatchUpEvents, w->spec.prev_kv, view->compact_revision(),
                       [&](std::string_view key) { return w->wants(key); }, &read, room);
    if (last < to) batch.revision = last;
    events.reserve(read.size());
    for (auto& ev : read) {
      if (!w->passes(ev)) continue;
      events.emplace_back(std::move(ev));
      events.back().encode();
    }
    refs.reserve(events.size());
    for (const auto& ev : events) {
      refs.push_back(EventRef{&ev, ev.has_prev()});
      batch.bytes += refs.back().bytes().size();
    }
    batch.events = std::span<const EventRef>(refs);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (w->removed) return;
  if (!batch.events.empty() && !w->sink->offer(batch)) return;
  w->next_rev = std::max(w->next_rev, last + 1);
  if (w->next_rev > revision_) {
    make_synced(w);
  } else {
    // More was published meanwhile (or this step stopped early): go again.
    std::lock_guard<std::mutex> wl(wake_mu_);
    woken_ = true;
  }
}

int64_t WatchHub::slow_watchers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(unsynced_.size());
}

int64_t WatchHub::streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  const WatchSink* last = nullptr;
  for (const auto& [key, w] : all_) {  // ordered by sink
    if (key.first != last) ++n;
    last = key.first;
  }
  return n;
}

}  // namespace etcdq::mvcc
