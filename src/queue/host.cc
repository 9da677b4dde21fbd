#include "queue/host.h"

#include <spdlog/spdlog.h>

#include <random>

#include "queue/keys.h"

namespace etcdq::queue {

// Instance ids start at a random point: a restarted member never names a
// consumer the way its previous process did, so the leader cannot mistake
// an old consumer's messages for a live one's.
Host::Host() : next_instance_((std::random_device{}() | (uint64_t{std::random_device{}()} << 32)) & ~0xffffULL) {
  if (next_instance_ == 0) next_instance_ = 1ULL << 16;
}

bool Host::watch_created(mvcc::WatchSink* sink, int64_t watch_id, std::string_view key, std::string_view range_end) {
  Key k;
  if (!consumer_watch(key, range_end, &k)) return false;
  add(sink, watch_id, k.queue, k.consumer);
  return true;
}

uint64_t Host::add(mvcc::WatchSink* sink, int64_t watch_id, std::string_view queue, std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t instance = ++next_instance_;
  Consumer c{sink, watch_id, ConsumerRef{std::string(queue), instance, std::string(name)}, {}, {}};
  consumers_.emplace(instance, std::move(c));
  by_watch_[{sink, watch_id}] = instance;
  ++version_;
  return instance;
}

void Host::erase_locked(uint64_t instance) {
  auto it = consumers_.find(instance);
  if (it == consumers_.end()) return;
  by_watch_.erase({it->second.sink, it->second.watch_id});
  consumers_.erase(it);
  ++version_;
}

bool Host::remove(mvcc::WatchSink* sink, int64_t watch_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_watch_.find({sink, watch_id});
  if (it == by_watch_.end()) return false;
  erase_locked(it->second);
  return true;
}

void Host::remove_all(mvcc::WatchSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> gone;
  for (auto it = by_watch_.lower_bound({sink, INT64_MIN}); it != by_watch_.end() && it->first.first == sink; ++it) {
    gone.push_back(it->second);
  }
  for (uint64_t i : gone) erase_locked(i);
}

bool Host::flush_locked(Consumer& c) {
  // Batches of at most kMaxResponseBytes (one message may be larger):
  // clients keep gRPC's default 4 MiB receive limit, and a stream that is
  // full refuses the next one, which is how a stuck consumer shows. The
  // stream queues a batch as one response, or joins it to the consumer's
  // queued one, and splits it between messages past its merge bound
  // (server/watch_outbox.h), as a watcher's events of several revisions.
  while (!c.waiting.empty()) {
    mvcc::WatchBatch b;
    b.watch_id = c.watch_id;
    b.holds_answers = false;
    size_t bytes = 0, n = 0;
    for (const auto& d : c.waiting) {
      size_t size = d.kv.ByteSizeLong() + 16;
      if (n > 0 && bytes + size > kMaxResponseBytes) break;
      bytes += size;
      ++n;
    }
    b.revision = c.waiting[n - 1].revision;
    std::vector<mvcc::HubEvent> events;
    events.reserve(n);
    // The key-values move into the events (no copy of the payloads) and
    // move back below if the stream cannot take them now.
    for (size_t i = 0; i < n; ++i) {
      mvccpb::Event ev;
      ev.set_type(mvccpb::Event::PUT);
      ev.mutable_kv()->Swap(&c.waiting[i].kv);
      events.emplace_back(std::move(ev));
      events.back().encode();
    }
    std::vector<mvcc::EventRef> refs;
    refs.reserve(n);
    for (const auto& ev : events) {
      refs.push_back(mvcc::EventRef{&ev, false});
      b.bytes += refs.back().bytes().size();
    }
    b.events = std::span<const mvcc::EventRef>(refs);
    if (!c.sink->offer(b)) {
      for (size_t i = 0; i < n; ++i) c.waiting[i].kv = events[i].event().kv();
      if (c.waiting_since == Clock::time_point{}) c.waiting_since = Clock::now();
      return false;
    }
    c.waiting.erase(c.waiting.begin(), c.waiting.begin() + static_cast<long>(n));
    c.waiting_since = {};
  }
  return true;
}

void Host::deliver(std::vector<Delivery>&& deliveries) {
  // On the apply thread, after the entry that decided them: an idle
  // consumer's stream writes from here, with no writer thread to wake
  // (a synchronous worker's produce-to-delivery, issue #37).
  mvcc::WatchHub::run_deferring([&] {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Consumer*> touched;
    for (auto& d : deliveries) {
      auto it = consumers_.find(d.instance);
      if (it == consumers_.end()) continue;  // gone: the leader redelivers what it held
      if (it->second.waiting.empty()) touched.push_back(&it->second);
      it->second.waiting.push_back(std::move(d));
    }
    for (Consumer* c : touched) flush_locked(*c);
  });
}

void Host::tick() {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  std::vector<uint64_t> stuck;
  for (auto& [instance, c] : consumers_) {
    // A stream with room takes every delivery into its buffer, so a client
    // that stopped reading with less than that buffer handed to it shows
    // only as a write that never ends: it takes nothing either.
    bool flushed = flush_locked(c);
    if (c.sink->write_stalled_for(kTakeTimeout) || (!flushed && now - c.waiting_since >= kTakeTimeout)) {
      stuck.push_back(instance);
    }
  }
  for (uint64_t instance : stuck) {
    const Consumer& c = consumers_.at(instance);
    spdlog::warn("queue {}: consumer {} took no delivery for {} s; dropping it, its messages go to others",
                 c.ref.queue, c.ref.name, kTakeTimeout.count());
    cancel_locked(instance, "etcdq: queue consumer dropped: it took no delivery for 5 s");
  }
}

void Host::cancel_locked(uint64_t instance, const std::string& reason) {
  auto it = consumers_.find(instance);
  if (it == consumers_.end()) return;
  mvcc::WatchBatch cancel;
  cancel.watch_id = it->second.watch_id;
  cancel.revision = it->second.waiting.empty() ? 0 : it->second.waiting.back().revision;
  cancel.cancel_reason = reason;
  it->second.sink->offer(cancel);
  erase_locked(instance);
}

void Host::revoke(const std::vector<uint64_t>& instances) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t instance : instances) {
    auto it = consumers_.find(instance);
    if (it == consumers_.end()) continue;
    spdlog::warn("queue {}: the leader handed consumer {}'s messages to others (it lost track of this member); "
                 "dropping the consumer so it knows",
                 it->second.ref.queue, it->second.ref.name);
    cancel_locked(instance, "etcdq: queue consumer dropped: the leader handed its messages to others");
  }
}

bool Host::has(uint64_t instance) const {
  std::lock_guard<std::mutex> lock(mu_);
  return consumers_.count(instance) > 0;
}

std::vector<ConsumerRef> Host::consumers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ConsumerRef> out;
  out.reserve(consumers_.size());
  for (const auto& [instance, c] : consumers_) out.push_back(c.ref);
  return out;
}

}  // namespace etcdq::queue
