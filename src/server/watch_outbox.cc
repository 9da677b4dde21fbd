#include "server/watch_outbox.h"

#include <algorithm>

#include "server/watch_service.h"

namespace etcdq::server {

void WatchOutbox::add_events(const member::WatchBatch& b, bool fragment, size_t fragment_limit, uint64_t* open_seq) {
  member::watches::events_queued(b.events.size());
  const auto events = b.events;
  if (fragment) {
    // etcd fragments a response (a revision, or a catch-up batch of many)
    // that needs more than the limit: parts of whole events, which the
    // client joins again (v3rpc/watch.go sendFragments).
    size_t total = 0;
    for (const auto& ev : events) total += event_field_size(ev.bytes().size());
    if (total + kMaxWirePrefix > fragment_limit) {
      add_fragments(b.watch_id, b.revision, events, fragment_limit);
      if (open_seq != nullptr) *open_seq = kNoResponse;  // later events start a response of their own
      return;
    }
  }
  size_t total = 0;
  for (const auto& ev : events) total += event_field_size(ev.bytes().size());
  // The watcher's queued response is open while not being written
  // (seq >= head_seq_) and no control response was queued after it
  // (seq >= barrier_seq_); it takes the batch while it stays within
  // kMergeBytes (and within the fragment limit for a watcher that asked
  // for fragments: a joined response must never need them).
  size_t bound = WatchService::kMergeBytes;
  if (fragment) bound = std::min(bound, fragment_limit > kMaxWirePrefix ? fragment_limit - kMaxWirePrefix : 0);
  if (open_seq != nullptr && *open_seq != kNoResponse && *open_seq >= head_seq_ && *open_seq >= barrier_seq_) {
    Out& q = out_[static_cast<size_t>(*open_seq - head_seq_)];
    if (q.body.size() + total <= bound) {
      for (const auto& ev : events) append_event_field(&q.body, ev.bytes());
      q.events += events.size();
      q.revision = b.revision;
      add_queued(total);
      return;
    }
  }
  // New responses: the batch whole, or past kMaxEventsResponseBytes in
  // parts of whole revisions (a revision bigger than that goes alone).
  Out* part = nullptr;
  size_t i = 0;
  while (i < events.size()) {
    int64_t rev = events[i].event->revision();
    size_t j = i, n = 0;
    for (; j < events.size() && events[j].event->revision() == rev; ++j) n += event_field_size(events[j].bytes().size());
    if (part != nullptr && part->body.size() + n > WatchService::kMaxEventsResponseBytes) {
      add_queued(part->body.size() + kMaxWirePrefix);
      part = nullptr;
    }
    if (part == nullptr) {
      part = &push(b.watch_id, rev);
      part->body.reserve(std::min(total, WatchService::kMaxEventsResponseBytes));
    }
    for (size_t k = i; k < j; ++k) append_event_field(&part->body, events[k].bytes());
    part->events += j - i;
    // The batch's header revision goes with its last revision.
    part->revision = j == events.size() ? std::max(rev, b.revision) : rev;
    i = j;
  }
  add_queued(part->body.size() + kMaxWirePrefix);
  if (open_seq != nullptr) *open_seq = part->seq;
}

// A batch too big for one response: parts of whole events, each but the
// last marked `fragment`.
void WatchOutbox::add_fragments(int64_t watch_id, int64_t revision, std::span<const member::EventRef> events,
                                size_t limit) {
  Out* part = nullptr;
  for (const auto& ev : events) {
    size_t n = event_field_size(ev.bytes().size());
    if (part != nullptr && !part->body.empty() && kMaxWirePrefix + part->body.size() + n > limit) {
      part->fragment = true;
      add_queued(part->body.size() + kMaxWirePrefix);
      part = nullptr;
    }
    if (part == nullptr) part = &push(watch_id, revision);
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
