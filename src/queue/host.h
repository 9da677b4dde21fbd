// The queue consumers this member hosts: one per consumer Watch
// (/q/{queue}/c/{consumer}, QUEUES.md), for as long as that watch lives.
// The leader decides which consumer gets which message; when this member
// applies a decision naming one of its consumers, the message goes out on
// that consumer's watch as a PUT event (kv = the message).
//
// A stream that has no room takes nothing: the delivery waits here and is
// retried by tick(). A consumer that has not taken a waiting delivery for
// kTakeTimeout, or whose stream's write has been under way that long (its
// client reads nothing, though the stream still had room for what it was
// handed), is dropped: its watch is canceled with a reason, and what it
// held is delivered to others (the leader sees it gone).
//
// Thread-safety: every method may be called from any thread. Sinks are
// called with the host's lock held (as the watch hub calls them).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mvcc/watch_hub.h"
#include "queue/book.h"

namespace etcdq::queue {

struct ConsumerRef {
  std::string queue;
  uint64_t instance = 0;
  std::string name;  // the {consumer} the client chose
};

class Host {
 public:
  Host();

  // The watch-create hook of the member's Watch service: a watch on a
  // consumer key (queue/keys.h, consumer_watch) becomes the consumer
  // `watch_id` of `sink` here, and true; any other watch is left to the
  // watch hub (false).
  bool watch_created(mvcc::WatchSink* sink, int64_t watch_id, std::string_view key, std::string_view range_end);
  // Registers the consumer watch `watch_id` of `sink`; returns its instance
  // id (unique to this process, never reused).
  uint64_t add(mvcc::WatchSink* sink, int64_t watch_id, std::string_view queue, std::string_view name);
  // After these return, `sink` is not called for the removed consumers.
  bool remove(mvcc::WatchSink* sink, int64_t watch_id);
  void remove_all(mvcc::WatchSink* sink);

  // The apply thread: messages assigned to our consumers. Never blocks.
  void deliver(std::vector<Delivery>&& deliveries);
  // Drops these consumers, telling each (its watch is canceled with the
  // reason): the leader handed what they held to others.
  void revoke(const std::vector<uint64_t>& instances);
  // Retries waiting deliveries and drops consumers that do not take them.
  void tick();

  bool has(uint64_t instance) const;
  std::vector<ConsumerRef> consumers() const;
  // Changes whenever a consumer comes or goes.
  uint64_t version() const { return version_.load(); }

  static constexpr std::chrono::seconds kTakeTimeout{5};
  static constexpr size_t kMaxResponseBytes = 1 << 20;

 private:
  using Clock = std::chrono::steady_clock;
  struct Consumer {
    mvcc::WatchSink* sink;
    int64_t watch_id;
    ConsumerRef ref;
    std::deque<Delivery> waiting;
    Clock::time_point waiting_since{};
  };
  bool flush_locked(Consumer& c);  // true when nothing waits
  void erase_locked(uint64_t instance);
  void cancel_locked(uint64_t instance, const std::string& reason);

  mutable std::mutex mu_;
  std::map<uint64_t, Consumer> consumers_;  // by instance
  std::map<std::pair<mvcc::WatchSink*, int64_t>, uint64_t> by_watch_;
  uint64_t next_instance_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace etcdq::queue
