#include "mvcc/watch_hub.h"

#include <algorithm>

#include "mvcc/event_log.h"
#include "mvcc/range.h"
#include "mvcc/store.h"

namespace etcdq::mvcc {
namespace {
// Events read from storage per catch-up step of one watcher: bounds the
// memory and the time one step holds.
constexpr size_t kCatchUpEvents = 1000;
constexpr auto kCatchUpInterval = std::chrono::milliseconds(20);
}  // namespace

struct WatchHub::Watcher {
  WatchSink* sink;
  int64_t id;
  WatchSpec spec;
  // Unsynced: the first revision not yet delivered. Synced: revisions
  // below it are not delivered (a start revision in the future).
  int64_t next_rev;
  bool synced = false;
  bool removed = false;

  bool wants(std::string_view key) const { return in_range(key, spec.key, spec.end); }
  bool passes(const mvccpb::Event& ev) const {
    return !(ev.type() == mvccpb::Event::PUT && spec.no_put) && !(ev.type() == mvccpb::Event::DELETE && spec.no_delete);
  }
  // The encoded size of shape()'s copy of `ev`, near enough for a budget.
  size_t shaped_size(const mvccpb::Event& ev) const {
    size_t n = ev.ByteSizeLong();
    if (!spec.prev_kv && ev.has_prev_kv()) n -= std::min(n, ev.prev_kv().ByteSizeLong());
    return n;
  }
  // A copy of `ev` shaped for this watcher, or false when its filters drop it.
  bool shape(const mvccpb::Event& ev, std::vector<mvccpb::Event>* out) const {
    if (ev.type() == mvccpb::Event::PUT && spec.no_put) return false;
    if (ev.type() == mvccpb::Event::DELETE && spec.no_delete) return false;
    out->push_back(ev);
    if (!spec.prev_kv) out->back().clear_prev_kv();
    return true;
  }
};

WatchHub::WatchHub(Store* store)
    : store_(store),
      revision_(store->view()->revision()),
      thread_([this] { run(); }),
      dispatch_thread_([this] { dispatch_loop(); }) {}

WatchHub::~WatchHub() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    dispatch_stop_ = true;
  }
  queue_cv_.notify_all();
  dispatch_thread_.join();
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

bool WatchHub::all_synced(WatchSink* sink) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = all_.lower_bound({sink, INT64_MIN}); it != all_.end() && it->first.first == sink; ++it) {
    if (!it->second->synced) return false;
  }
  return true;
}

bool WatchHub::is_synced(WatchSink* sink, int64_t watch_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = all_.find({sink, watch_id});
  return it != all_.end() && it->second->synced;
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
  size_t bytes = 0;
  for (const auto& ev : events) {
    bytes += ev.kv().key().size() + ev.kv().value().size() + ev.prev_kv().value().size();
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (queued_events_ + events.size() > kMaxQueuedEvents || queued_bytes_ + bytes > kMaxQueuedBytes) {
      // Delivery is far behind: drop what is queued; watchers read it from
      // storage instead (an incomplete batch makes every synced one catch up).
      queue_.clear();
      queued_events_ = 0;
      queued_bytes_ = 0;
      queue_.push_back(Published{{}, false, revision, 0});
    } else {
      queued_events_ += events.size();
      queued_bytes_ += bytes;
      queue_.push_back(Published{std::move(events), complete, revision, bytes});
    }
  }
  queue_cv_.notify_one();
}

void WatchHub::dispatch_loop() {
  std::unique_lock<std::mutex> lock(queue_mu_);
  for (;;) {
    queue_cv_.wait(lock, [this] { return dispatch_stop_ || !queue_.empty(); });
    if (dispatch_stop_) return;
    Published p = std::move(queue_.front());
    queue_.pop_front();
    queued_events_ -= std::min(queued_events_, p.events.size());
    queued_bytes_ -= std::min(queued_bytes_, p.bytes);
    lock.unlock();
    dispatch(std::move(p));
    lock.lock();
  }
}

void WatchHub::dispatch(Published&& p) {
  std::vector<mvccpb::Event>& events = p.events;
  bool complete = p.complete;
  int64_t revision = p.revision;
  bool lagging;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t first = revision_ + 1;
    revision_ = revision;
    if (!complete) {
      std::vector<Watcher*> synced;
      for (auto& [k, w] : all_) {
        if (w->synced) synced.push_back(w.get());
      }
      for (Watcher* w : synced) make_unsynced(w, first);
    } else {
      // Per watcher, the events of this revision it gets; they are copied
      // only for a sink that has room for them (with many stuck streams a
      // copy per watcher, thrown away by offer(), was most of the memory).
      std::vector<std::pair<Watcher*, std::vector<const mvccpb::Event*>>> out;
      std::unordered_map<Watcher*, size_t> slot;
      size_t i = 0;
      while (i < events.size()) {
        int64_t rev = events[i].kv().mod_revision();
        size_t j = i;
        while (j < events.size() && events[j].kv().mod_revision() == rev) ++j;
        out.clear();
        slot.clear();
        auto consider = [&](Watcher* w, const mvccpb::Event& ev) {
          if (!w->synced || rev < w->next_rev) return;
          if (!w->passes(ev)) return;
          auto [it, fresh] = slot.emplace(w, out.size());
          if (fresh) out.emplace_back(w, std::vector<const mvccpb::Event*>{});
          out[it->second].second.push_back(&ev);
        };
        for (size_t k = i; k < j; ++k) {
          const auto& key = events[k].kv().key();
          if (auto it = synced_keys_.find(key); it != synced_keys_.end()) {
            for (Watcher* w : it->second) consider(w, events[k]);
          }
          for (auto& [range, ws] : synced_ranges_) {
            if (!in_range(key, range.first, range.second)) continue;
            for (Watcher* w : ws) consider(w, events[k]);
          }
        }
        for (auto& [w, evs] : out) {
          size_t bytes = 0;
          for (const auto* ev : evs) bytes += w->shaped_size(*ev);
          if (!w->sink->fits(bytes)) {
            make_unsynced(w, rev);
            continue;
          }
          WatchBatch batch;
          batch.watch_id = w->id;
          batch.revision = rev;
          batch.events.reserve(evs.size());
          for (const auto* ev : evs) w->shape(*ev, &batch.events);
          if (!w->sink->offer(std::move(batch))) make_unsynced(w, rev);
        }
        i = j;
      }
    }
    lagging = !unsynced_.empty();
  }
  if (lagging) wake();
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (w->removed || w->synced) return;
    room = w->sink->room();
    if (room == 0) return;
  }
  auto view = store_->view();
  int64_t to = view->revision();
  WatchBatch batch;
  batch.watch_id = w->id;
  batch.revision = to;
  int64_t from = w->next_rev;  // only this thread changes an unsynced watcher's next_rev
  if (from < view->compact_revision()) {
    // The revisions it needs are gone: cancel it with the watermark so the
    // client can resume from there (etcd's chooseAll/compacted path).
    batch.compact_revision = view->compact_revision();
    std::lock_guard<std::mutex> lock(mu_);
    if (w->removed || !w->sink->offer(std::move(batch))) return;
    w->removed = true;
    unsynced_.erase({w->sink, w->id});
    all_.erase({w->sink, w->id});
    count_.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  int64_t last = from - 1;
  if (from <= to) {
    last = read_events(*view, from, to, kCatchUpEvents, w->spec.prev_kv,
                       [&](std::string_view key) { return w->wants(key); }, &batch.events, room);
    if (last < to) batch.revision = last;
    std::vector<mvccpb::Event> shaped;
    shaped.reserve(batch.events.size());
    for (auto& ev : batch.events) w->shape(ev, &shaped);
    batch.events.swap(shaped);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (w->removed) return;
  if (!batch.events.empty() && !w->sink->offer(std::move(batch))) return;
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
