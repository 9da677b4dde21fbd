// The responses one watch stream has queued for its client, and the bytes
// they hold (server/watch_stream.h owns one, under its lock).
//
// Events of a watcher join its last queued response while that one is not
// being written and no control response was queued after it, up to
// WatchService::kMergeBytes, so a busy stream sends fewer, fuller
// responses: everything that piled up for a watcher while its stream was
// busy, in revision order. A batch the hub hands (a watcher's events of
// one applied entry, or of a catch-up step) is one response, as etcd sends
// a catch-up batch, unless it is bigger than
// WatchService::kMaxEventsResponseBytes: then it is split between
// revisions. For a watcher that asked for `fragment`, a batch bigger than
// the fragment limit goes out in `fragment` parts of whole events
// instead, as etcd fragments one response. Control
// responses (created, canceled, progress) are serialized as they are
// queued and end joining: a progress response says every event up to its
// revision was sent, so no later event may join a response before it.
//
// start_write() is the one place where queued events become a response's
// bytes: the hub serialized each event once (mvcc::HubEvent), and
// watch_wire.h copies them, behind the header, into the buffer gRPC writes.
//
// Bytes: each response counts its body plus kMaxWirePrefix (which also
// stands for the entry's own memory, so many tiny responses are bounded
// too); held_bytes() is the queue plus the response being written. Every
// change is added to the total all streams hold (`total`, given), which
// the flow-control rules read (WatchService::takes, catch_up_room).
//
// Sequence numbers: each response gets the next one; head_seq() is the
// front's, so everything below it has been written (or dropped), which
// the answers waiting on this stream go by (member/answer_gate.h).
//
// Thread-safety: none; the owner's lock guards every call.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <span>
#include <string>

#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "member/watches.h"
#include "server/watch_wire.h"

namespace etcdq::server {

class WatchOutbox {
 public:
  static constexpr uint64_t kNoResponse = UINT64_MAX;

  explicit WatchOutbox(std::atomic<size_t>* total) : total_(total) {}
  ~WatchOutbox() {
    drop();
    release();
  }

  // `b`'s events (one or more revisions, in order) for a watcher whose
  // last events response is *open_seq (kNoResponse: none; null: never
  // join): joined to it if it stays within kMergeBytes, else queued as a
  // new response (parts of whole revisions past kMaxEventsResponseBytes);
  // or, when `fragment` is set and they need more than `fragment_limit`
  // bytes, in `fragment` parts of at most that. Updates *open_seq.
  void add_events(const member::WatchBatch& b, bool fragment, size_t fragment_limit, uint64_t* open_seq);
  // A created, canceled or progress response, serialized now.
  void add_control(const etcdserverpb::WatchResponse& r);

  // Whether the front response is events, which start_write() gives a
  // header (control responses carry theirs). Not empty().
  bool front_is_events() const { return !out_.front().whole; }
  // The front response as the bytes to write (an events response gets `h`
  // with its revision), moved to "being written"; null when empty. The
  // buffer stays valid until write_done() or drop().
  const grpc::ByteBuffer* start_write(WireHeader h);
  // The write of start_write()'s buffer ended.
  void write_done();
  // Drops everything queued (the stream ends or its client is gone).
  void drop();
  // Takes this stream's share out of the total (the stream is done).
  void release();

  bool empty() const { return out_.empty(); }
  size_t held_bytes() const { return queued_bytes_ + inflight_bytes_; }
  size_t queued_bytes() const { return queued_bytes_; }
  size_t control_bytes() const { return control_bytes_; }
  size_t peak_bytes() const { return peak_bytes_; }
  uint64_t head_seq() const { return head_seq_; }
  uint64_t last_seq() const { return head_seq_ + out_.size() - 1; }  // not empty()

 private:
  // One queued response: a whole serialized WatchResponse (created,
  // canceled, progress), or the events of one watcher, written with its
  // header when the write starts.
  struct Out {
    uint64_t seq = 0;
    bool whole = false;
    int64_t watch_id = 0;
    int64_t revision = 0;  // the header's
    bool fragment = false;
    std::string body;  // `whole`: the response; else append_event_field entries
    size_t bytes = 0;  // what it counts in queued_bytes_ (`whole` only)
    size_t events = 0;  // events in body (member::watches::events_* counts)
  };

  Out& push(int64_t watch_id, int64_t revision);
  void add_queued(size_t bytes);  // to the last response pushed or joined
  void add_fragments(int64_t watch_id, int64_t revision, std::span<const member::EventRef> events, size_t limit);
  void sync_total();  // wherever held_bytes() changes

  std::atomic<size_t>* const total_;
  std::deque<Out> out_;
  uint64_t head_seq_ = 0;     // seq of out_.front()
  uint64_t barrier_seq_ = 0;  // no response before this seq takes more events
  grpc::ByteBuffer writing_buf_;  // the response being written
  size_t queued_bytes_ = 0;    // of out_
  size_t control_bytes_ = 0;   // of out_'s control responses (whole)
  size_t inflight_bytes_ = 0;  // of writing_buf_
  size_t peak_bytes_ = 0;      // the most held_bytes() ever was
  size_t counted_ = 0;         // what this stream adds to *total_
};

}  // namespace etcdq::server
