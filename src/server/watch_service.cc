#include "server/watch_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "common/memory.h"
#include "server/leader_monitor.h"
#include "server/watch_stream.h"

namespace etcdq::server {

namespace {
constexpr size_t kCatchUpRoomFrom = WatchService::kMaxQueuedBytes / 4 * 3;
}  // namespace

size_t WatchService::catch_up_room(size_t held, bool empty, size_t total) {
  if (!empty && held > kCatchUpRoomFrom) return 0;
  size_t room = held < kMaxQueuedBytes ? kMaxQueuedBytes - held : 0;
  if (total < kMaxTotalQueuedBytes) return std::min(room, kMaxTotalQueuedBytes - total);
  // Past the total only a stream that holds nothing reads, one batch.
  return held == 0 ? std::min(room, kMergeBytes) : 0;
}

bool WatchService::takes(size_t held, bool empty, size_t bytes, bool one_revision, size_t total) {
  bool stream_ok = empty || held + bytes <= kMaxQueuedBytes || (one_revision && held <= kCatchUpRoomFrom);
  if (!stream_ok) return false;
  if (total + bytes <= kMaxTotalQueuedBytes) return true;
  if (held != 0) return false;
  return total < kHardTotalQueuedBytes || bytes <= kMergeBytes;
}

WatchService::WatchService(Context* ctx, std::chrono::milliseconds progress_interval)
    : RuledService(ctx), ctx_(ctx), progress_interval_(progress_interval), progress_thread_([this] { progress_loop(); }) {
  raw_bidi("Watch", &WatchService::Watch);
}

WatchService::~WatchService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  progress_thread_.join();
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* WatchService::Watch(grpc::CallbackServerContext* c) {
  auto* s = new WatchStream(this, ctx_, credentials_of(c), c);
  WatchStream::Action a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.insert(s);
    if (stopping_) a = s->shutdown();
  }
  s->perform(a);
  return s;
}

void WatchService::forget(WatchStream* s) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(s);
  if (streams_.empty()) done_cv_.notify_all();
}

// Streams' gRPC calls are started outside mu_: gRPC may run OnDone inline
// in Finish, and OnDone takes mu_ (forget). A stream cannot go away before
// its reserved write or Finish is started, so the pointers stay valid.
void WatchService::shutdown() {
  std::vector<std::pair<WatchStream*, WatchStream::Action>> todo;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto* s : streams_) todo.emplace_back(s, s->shutdown());
  }
  cv_.notify_all();
  for (auto& [s, a] : todo) {
    if (a.kind != WatchStream::Action::kNone) s->perform(a);
  }
}

bool WatchService::wait_streams_done(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return done_cv_.wait_for(lock, timeout, [this] { return streams_.empty(); });
}

void WatchService::stream_closed(size_t peak_bytes) {
  {
    // Counted over streams: hundreds of streams that held under the
    // threshold each (the total's bound cuts them to one batch) free as
    // much together as a few big ones.
    std::lock_guard<std::mutex> lock(mu_);
    closed_peaks_ += peak_bytes;
    if (closed_peaks_ < kTrimAfterBytes) return;
    closed_peaks_ = 0;
    trim_wanted_ = true;
  }
  cv_.notify_all();
}

void WatchService::evict_stuck() {
  auto now = AnswerGate::Clock::now();
  std::vector<std::pair<WatchStream*, WatchStream::Evict>> stuck;
  size_t cancels = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    for (auto* s : streams_) {
      auto how = s->reserve_eviction(now - kStuckWrite, now - kStuckClose);
      if (how == WatchStream::Evict::kNone) continue;
      stuck.emplace_back(s, how);
      if (how == WatchStream::Evict::kCancel) ++cancels;
    }
  }
  if (stuck.empty()) return;
  spdlog::warn("closing {} watch stream(s) whose client has read nothing for {} s, and the connections of {} "
               "canceled before that did not take it, while watch streams hold {} MiB (over {} MiB): their "
               "events wait in storage",
               cancels, std::chrono::duration_cast<std::chrono::seconds>(kStuckWrite).count(), stuck.size() - cancels,
               total_held_.load() >> 20, kMaxTotalQueuedBytes >> 20);
  for (auto& [s, how] : stuck) s->evict(how);  // reserved: alive until this returns
}

void WatchService::end_streams_requiring_leader() {
  std::vector<std::pair<WatchStream*, WatchStream::Action>> todo;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    for (auto* s : streams_) {
      WatchStream::Action a = s->end_for_no_leader();
      if (a.kind != WatchStream::Action::kNone) todo.emplace_back(s, a);
    }
  }
  if (todo.empty()) return;
  spdlog::warn("ending {} watch stream(s) that require a leader: this member has had none for {} election timeouts",
               todo.size(), LeaderMonitor::kNoLeaderTicks);
  for (auto& [s, a] : todo) s->perform(a);  // reserved: alive until this returns
}

void WatchService::progress_loop() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kTrimGap = std::chrono::seconds(1);
  std::unique_lock<std::mutex> lock(mu_);
  auto next_progress = Clock::now() + progress_interval_;
  auto last_trim = Clock::now() - kTrimGap;
  while (!stopping_) {
    // Also every kPressureCheck: streams that hold the total may have to go.
    cv_.wait_until(lock, std::min(next_progress, Clock::now() + kPressureCheck),
                   [this] { return stopping_ || trim_wanted_; });
    if (stopping_) return;
    if (trim_wanted_) {
      // Streams often close together (a client process dies): wait a
      // little so one trim covers them, and never trim more than once a
      // second (it walks the allocator's free lists).
      auto at = std::max(Clock::now() + std::chrono::milliseconds(200), last_trim + kTrimGap);
      cv_.wait_until(lock, std::min(at, next_progress), [this] { return stopping_; });
      if (stopping_) return;
      if (Clock::now() >= at) {
        trim_wanted_ = false;
        lock.unlock();
        common::release_free_memory();
        lock.lock();
        last_trim = Clock::now();
      }
    }
    if (total_held_.load(std::memory_order_relaxed) >= kMaxTotalQueuedBytes) {
      lock.unlock();
      evict_stuck();
      lock.lock();
      if (stopping_) return;
    }
    if (Clock::now() < next_progress) continue;
    next_progress = Clock::now() + progress_interval_;
    std::vector<std::pair<WatchStream*, WatchStream::Action>> todo;
    for (auto* s : streams_) todo.emplace_back(s, s->progress_tick());
    lock.unlock();
    for (auto& [s, a] : todo) {
      if (a.kind != WatchStream::Action::kNone) s->perform(a);  // only then is `s` surely alive
    }
    lock.lock();
  }
}

}  // namespace etcdq::server
