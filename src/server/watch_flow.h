// The flow control of one watch stream (watch_stream.h): whether it takes
// a batch of events now, how much catching up may read for it, when it
// stops reading its client's requests and when it reads again, and when
// the hub's catch-up must be woken. The bounds are WatchService's
// (kMaxQueuedBytes, the totals, kMaxControlBytes; the rules takes and
// catch_up_room); the bytes are the stream's outbox (watch_outbox.h) and
// the total all streams hold.
//
// State: whether this stream refused events or had no room (starved: wake
// the hub once it has room) and whether its reads are paused; and, shared
// by every stream, whether a batch was refused for the total (pressed:
// the next write that brings the total under its bound wakes the hub).
//
// Thread-safety: the stream's lock guards every call; `total` and
// `pressed` are atomics shared with the other streams.
#pragma once

#include <atomic>
#include <cstddef>

#include "server/watch_outbox.h"

namespace etcdq::server {

class StreamFlow {
 public:
  StreamFlow(std::atomic<size_t>* total, std::atomic<bool>* pressed) : total_(total), pressed_(pressed) {}

  // Whether the stream takes a batch of `bytes` (`one_revision`: the events
  // of one revision, which must get through). Refused: the stream is
  // starved, and pressed when the total was the reason.
  bool takes(const WatchOutbox& o, size_t bytes, bool one_revision);
  // What catching up may read for the stream (the hub asks); 0: starved,
  // and pressed past the total.
  size_t room(const WatchOutbox& o);
  // The same, without marking anything.
  size_t catch_up_room(const WatchOutbox& o) const;

  // After a request was handled: whether to stop reading requests until
  // the client's answers drain (then reads are paused). A client that
  // sends requests but reads no answers (progress requests, refused
  // creates) would otherwise grow the queue without bound: as etcd's
  // recvLoop waits on its full ctrlStream. Only answers to requests
  // count, so a reader slower than the events still gets its cancels
  // read; once all streams together hold too much, far less of them
  // (kControlBytesUnderPressure).
  bool pause_reads(const WatchOutbox& o);
  // After a write ended: whether to wake the hub's catch-up (this stream
  // was starved, its client is not gone and it has room; or the total fell
  // under its bound after a refusal), and whether to read requests again
  // (paused, the stream is `open` — neither ending nor its client gone —
  // and the answers drained to half).
  bool wake_after_write(const WatchOutbox& o, bool client_gone);
  bool resume_reads(const WatchOutbox& o, bool open);

 private:
  size_t total() const { return total_->load(std::memory_order_relaxed); }

  std::atomic<size_t>* const total_;
  std::atomic<bool>* const pressed_;
  bool starved_ = false;
  bool read_paused_ = false;
};

}  // namespace etcdq::server
