#include "server/watch_flow.h"

#include "server/watch_service.h"

namespace etcdq::server {

bool StreamFlow::takes(const WatchOutbox& o, size_t bytes, bool one_revision) {
  size_t t = total();
  if (WatchService::takes(o.held_bytes(), o.empty(), bytes, one_revision, t)) return true;
  if (t + bytes > WatchService::kMaxTotalQueuedBytes) pressed_->store(true, std::memory_order_relaxed);
  starved_ = true;
  return false;
}

size_t StreamFlow::room(const WatchOutbox& o) {
  size_t r = catch_up_room(o);
  if (r == 0) {
    starved_ = true;  // wake_after_write wakes the hub when there is
    if (total() >= WatchService::kMaxTotalQueuedBytes) pressed_->store(true, std::memory_order_relaxed);
  }
  return r;
}

size_t StreamFlow::catch_up_room(const WatchOutbox& o) const {
  return WatchService::catch_up_room(o.held_bytes(), o.empty(), total());
}

bool StreamFlow::pause_reads(const WatchOutbox& o) {
  size_t control = o.control_bytes();
  bool full = control >= WatchService::kMaxControlBytes ||
              (control >= WatchService::kControlBytesUnderPressure && total() >= WatchService::kMaxTotalQueuedBytes);
  if (full) read_paused_ = true;
  return full;
}

bool StreamFlow::wake_after_write(const WatchOutbox& o, bool client_gone) {
  // A watcher that fell behind catches up once there is room; only then
  // is the hub's catch-up thread woken, not after every write.
  bool wake = starved_ && !client_gone && catch_up_room(o) > 0;
  if (wake) starved_ = false;
  // Streams refused for the total catch up once it is under it again.
  if (pressed_->load(std::memory_order_relaxed) && total() < WatchService::kMaxTotalQueuedBytes &&
      pressed_->exchange(false)) {
    wake = true;
  }
  return wake;
}

bool StreamFlow::resume_reads(const WatchOutbox& o, bool open) {
  size_t control = o.control_bytes();
  bool resume = read_paused_ && open && control <= WatchService::kMaxControlBytes / 2 &&
                (control < WatchService::kControlBytesUnderPressure / 2 ||
                 total() < WatchService::kMaxTotalQueuedBytes);
  if (resume) read_paused_ = false;
  return resume;
}

}  // namespace etcdq::server
