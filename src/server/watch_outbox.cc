#include "server/watch_outbox.h"

#include <algorithm>

#include "server/watch_service.h"

namespace etcdq::server {

void WatchOutbox::add_events(const member::WatchBatch& b, size_t bytes, bool fragment, size_t fragment_limit,
                             uint64_t* open_seq) {
  member::watches::events_queued(b.events.size());
  if (fragment && bytes + kMaxWirePrefix > fragment_limit) {
    add_fragments(b, fragment_limit);
    if (open_seq != nullptr) *open_seq = kNoResponse;  // later events start a response of their own
    return;
  }
  // Join the watcher's queued response if it has one and room: its events
  // stay in order and each revision stays whole. It is open while not
  // being written (seq >= head_seq_) and no control response was queued
  // after it (seq >= barrier_seq_).
  if (open_seq != nullptr && *open_seq != kNoResponse && *open_seq >= head_seq_ && *open_seq >= barrier_seq_) {
    Out& q = out_[static_cast<size_t>(*open_seq - head_seq_)];
    if (q.body.size() + bytes <= WatchService::kMergeBytes) {
      for (const auto& ev : b.events) append_event_field(&q.body, ev.bytes());
      q.events += b.events.size();
      q.revision = b.revision;
      add_queued(bytes);
      return;
    }
  }
  Out& q = push(b.watch_id, b.revision);
  q.body.reserve(bytes);
  for (const auto& ev : b.events) append_event_field(&q.body, ev.bytes());
  q.events = b.events.size();
  add_queued(bytes + kMaxWirePrefix);
  if (open_seq != nullptr) *open_seq = q.seq;
}

// One revision (or a catch-up step) too big for one response: parts of
// whole events, each but the last marked `fragment`.
void WatchOutbox::add_fragments(const member::WatchBatch& b, size_t limit) {
  Out* part = nullptr;
  for (const auto& ev : b.events) {
    size_t n = event_field_size(ev.bytes().size());
    if (part != nullptr && !part->body.empty() && kMaxWirePrefix + part->body.size() + n > limit) {
      part->fragment = true;
      add_queued(part->body.size() + kMaxWirePrefix);
      part = nullptr;
    }
    if (part == nullptr) part = &push(b.watch_id, b.revision);
    append_event_field(&part->body, ev.bytes());
    ++part->events;
  }
  add_queued(part->body.size() + kMaxWirePrefix);
}

void WatchOutbox::add_control(const etcdserverpb::WatchResponse& r) {
  Out& q = push(r.watch_id(), 0);
  q.whole = true;
  r.SerializeToString(&q.body);
  q.bytes = q.body.size() + kMaxWirePrefix;
  queued_bytes_ += q.bytes;
  control_bytes_ += q.bytes;
  peak_bytes_ = std::max(peak_bytes_, held_bytes());
  sync_total();
  barrier_seq_ = q.seq + 1;
}

const grpc::ByteBuffer* WatchOutbox::start_write(WireHeader h) {
  if (out_.empty()) return nullptr;
  Out& q = out_.front();
  size_t counted = q.whole ? q.bytes : q.body.size() + kMaxWirePrefix;
  if (q.whole) {
    grpc::Slice s(q.body.data(), q.body.size());
    writing_buf_ = grpc::ByteBuffer(&s, 1);
  } else {
    h.revision = q.revision;
    writing_buf_ = encode_watch_response(h, q.watch_id, q.fragment, &q.body);
  }
  if (q.events > 0) member::watches::events_sent(q.events);
  queued_bytes_ -= std::min(queued_bytes_, counted);
  if (q.whole) control_bytes_ -= std::min(control_bytes_, counted);
  inflight_bytes_ = counted;
  sync_total();
  out_.pop_front();
  ++head_seq_;
  return &writing_buf_;
}

void WatchOutbox::write_done() {
  inflight_bytes_ = 0;
  writing_buf_.Clear();
  sync_total();
}

void WatchOutbox::drop() {
  size_t events = 0;
  for (const Out& q : out_) events += q.events;
  if (events > 0) member::watches::events_dropped(events);
  head_seq_ += out_.size();
  out_.clear();
  queued_bytes_ = 0;
  control_bytes_ = 0;
  sync_total();
}

void WatchOutbox::release() {
  total_->fetch_sub(counted_, std::memory_order_relaxed);
  counted_ = 0;
}

WatchOutbox::Out& WatchOutbox::push(int64_t watch_id, int64_t revision) {
  Out& q = out_.emplace_back();
  q.seq = head_seq_ + out_.size() - 1;
  q.watch_id = watch_id;
  q.revision = revision;
  return q;
}

void WatchOutbox::add_queued(size_t bytes) {
  queued_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, held_bytes());
  sync_total();
}

void WatchOutbox::sync_total() {
  size_t now = held_bytes();
  if (now >= counted_) {
    total_->fetch_add(now - counted_, std::memory_order_relaxed);
  } else {
    total_->fetch_sub(counted_ - now, std::memory_order_relaxed);
  }
  counted_ = now;
}

}  // namespace etcdq::server
