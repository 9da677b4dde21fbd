// etcd's Watch service: one bidirectional stream per client call, any
// number of watchers on it (gRPC callback API: no thread per stream).
//
// The method is registered raw (ByteBuffer in and out): requests are parsed
// here, and event responses are assembled from the events the hub encoded
// once (watch_wire.h), not built and serialized per watcher.
//
// Each stream keeps one write in flight and a queue behind it; the hub
// hands a watcher all of its events of one applied entry at once, which
// go out as one response, and events for a watcher whose last response
// is still queued (not being written) join that response, up to
// kMergeBytes, so a busy stream sends fewer, fuller responses (each
// revision whole, in order; watch_outbox.h). The queue is bounded
// (kMaxQueuedBytes): when it is full the hub stops handing this stream
// events and its watchers catch up from storage once it drains, so a
// client that stops reading costs at most that much memory and never
// slows apply or another client. An idle stream that gets events starts
// its write once the hub has dispatched the whole applied entry (so a
// watcher's events of one entry go in one response): on the apply thread
// after the hub lock is released for the first few streams of an entry
// (mvcc::WatchHub::defer), on a writer thread (watch_writers.h) for the
// rest. The answers to an entry's proposals wait until the streams that
// took its events have written them, bounded (member/answer_gate.h):
// watchers get a put's event before its writer gets the answer, as from
// etcd.
//
// One stream is a WatchStream (watch_stream.h), split by role: request
// decoding and checks (watch_request.h), its watchers (stream_watchers.h),
// its queued responses and their bytes (watch_outbox.h: the one place
// events become bytes), its flow control (watch_flow.h), the reactor. This service owns what all
// streams share: the total bound, the writer threads,
// progress notifications and the eviction of streams that do not read.
//
// Responses follow etcd's v3rpc/watch.go: `created` first (header revision
// = the current revision), events with the revision they were published
// at (a merged response: the last one's), `canceled` with
// `compact_revision` when the start revision was compacted, cancel
// confirmations, progress responses (watch_id -1 for a
// WatchProgressRequest when all watchers are synced; per watcher for
// progress_notify), and `fragment` splitting for watchers that asked.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "member/watches.h"
#include "member/answer_gate.h"
#include "server/context.h"
#include "server/ruled_service.h"
#include "server/watch_writers.h"

namespace etcdq::server {

using member::AnswerGate;

class WatchStream;

class WatchService final
    : public RuledService<etcdserverpb::Watch, etcdserverpb::Watch::WithRawCallbackMethod_Watch<etcdserverpb::Watch::Service>> {
 public:
  // `progress_interval`: how often watchers with progress_notify get an
  // empty response while synced (etcd's default is 10 minutes).
  WatchService(Context* ctx, std::chrono::milliseconds progress_interval);
  ~WatchService() override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* c) override;

  // Ends every stream with Unavailable "etcdserver: server stopped" and no
  // cancel responses, so clients reconnect and resume their watches (what
  // they see of a stopping etcd; test_watch_sigterm.py).
  void shutdown();
  // Ends the streams whose clients asked for a leader ("hasleader: true")
  // with Unavailable "etcdserver: no leader" (WatchStream::end_for_no_leader;
  // leader_monitor.h says when). Any thread.
  void end_streams_requiring_leader();
  // After shutdown(): waits until every stream is done (its Unavailable
  // delivered) or `timeout` passes; true if none is left. gRPC's own
  // shutdown deadline cancels what is left, which clients take as final.
  bool wait_streams_done(std::chrono::milliseconds timeout);

  // What one stream may hold for its client: queued responses plus gRPC's
  // copy of the one being written. One revision that does not fit is
  // still taken while the stream holds at most three quarters of this
  // (a revision must get through, whatever its size), so the most a
  // stream holds is 3 MiB plus one revision.
  static constexpr size_t kMaxQueuedBytes = 4 << 20;
  // What all streams together may hold before each stream is cut down to
  // what it needs to keep moving: past this, a stream takes events only
  // while it holds nothing (one batch, which a reading client writes at
  // once), and catching up reads at most kMergeBytes for it. Without it
  // a few hundred streams that never read held 4 MiB each (etcd holds up
  // to 128 responses a watcher, with no total). The slowest streams wait:
  // their watchers catch up from storage once they read again.
  static constexpr size_t kMaxTotalQueuedBytes = 256 << 20;
  // Past this, even a stream holding nothing takes at most kMergeBytes at
  // a time; a bigger revision waits in storage until the total is below
  // it. A stream that does not read then holds at most what it took before
  // (one revision of any size, while the total was under this) and then
  // one batch of kMergeBytes, until kStuckWrite cancels it.
  static constexpr size_t kHardTotalQueuedBytes = 512 << 20;
  // Of the control bytes below, what a stream may keep once the total is
  // past kMaxTotalQueuedBytes before it stops reading requests.
  static constexpr size_t kControlBytesUnderPressure = 16 << 10;
  // While the total is past kMaxTotalQueuedBytes, a stream whose write has
  // been in flight this long (its client reads nothing) is canceled, so
  // that what it holds goes back and readers' big revisions get through
  // (past kHardTotalQueuedBytes they wait for it). Checked every
  // kPressureCheck. Its client sees CANCELLED (etcd never closes a slow
  // watcher; Kubernetes' apiserver closes its own slow watchers alike).
  // A cancel frees what gRPC holds behind HTTP/2 flow control, not what
  // it has already framed for a socket the client no longer reads at all
  // (it granted big windows, then stopped): a stream whose write has
  // still not finished kStuckClose after its cancel has its connection
  // closed (every stream on it was stuck behind the same socket).
  static constexpr std::chrono::seconds kStuckWrite{10};
  static constexpr std::chrono::seconds kStuckClose{5};
  static constexpr std::chrono::seconds kPressureCheck{1};
  // Of those, answers to the client's own requests (created, canceled,
  // progress): past this the stream stops reading its requests until half
  // has been written, as etcd's recvLoop blocks on its full ctrlStream. A
  // client that sends but never reads holds this much, not more.
  static constexpr size_t kMaxControlBytes = 1 << 20;
  // Streams that held this much together (their peaks), once closed, have
  // the allocator give freed memory back to the system (common/memory.h,
  // at most once a second): the allocator keeps freed memory otherwise,
  // and the RSS of a member that served stuck clients would never come down.
  static constexpr size_t kTrimAfterBytes = 1 << 20;
  // A queued response takes more events for its watcher up to this size
  // (well under any fragment limit and gRPC's default 4 MiB receive limit).
  static constexpr size_t kMergeBytes = 64 << 10;
  // A batch of one watcher's events (an applied entry's: at full write
  // speed the writes of many clients; or a catch-up step) goes in one
  // response up to this size, as etcd sends a catch-up batch whole; a
  // bigger one is split between revisions (one revision bigger than this
  // goes alone). etcd sends a synced watcher one revision a response, so
  // an entry of many big writes must not become one message past gRPC's
  // default 4 MiB receive limit, which etcd's would not reach.
  static constexpr size_t kMaxEventsResponseBytes = 1 << 20;
  // The bounds as rules, for a stream holding `held` bytes (`empty`:
  // nothing queued behind the write in flight) while all streams hold
  // `total` bytes. catch_up_room: how many bytes of events catching up may
  // read for it (0 from three quarters of the bound on: reading for a
  // sliver of room is mostly thrown away). takes: whether it takes a batch
  // of `bytes`; a batch of one revision always fits where catch_up_room is
  // not 0 and the total is under kHardTotalQueuedBytes, or a revision
  // bigger than the room would be read again after every write and never
  // get through. Pure.
  static size_t catch_up_room(size_t held, bool empty, size_t total);
  static bool takes(size_t held, bool empty, size_t bytes, bool one_revision, size_t total);

  // What all streams hold now, in bytes (thread-safe; for tests and metrics).
  size_t total_queued_bytes() const { return total_held_.load(std::memory_order_relaxed); }

  // Threads that start writes on idle streams (gRPC's own threads start
  // the writes that follow).
  static constexpr int kWriterThreads = 2;

 private:
  friend class WatchStream;
  void forget(WatchStream* s);
  void stream_closed(size_t peak_bytes);  // after the stream was deleted
  void progress_loop();
  void evict_stuck();  // mu_ not held

  // Sum of every stream's held bytes (each stream adds its changes).
  std::atomic<size_t> total_held_{0};
  // A batch was refused for the total: the next write that brings the
  // total under kMaxTotalQueuedBytes wakes the hub's catch-up.
  std::atomic<bool> pressed_{false};
  Context* ctx_;
  std::chrono::milliseconds progress_interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<WatchStream*> streams_;
  std::condition_variable done_cv_;  // streams_ became empty
  bool stopping_ = false;
  bool trim_wanted_ = false;
  size_t closed_peaks_ = 0;  // peak bytes of the streams closed since the last trim was wanted
  std::thread progress_thread_;  // progress notifications and trims
  // The threads that start writes of idle streams the apply thread hands
  // over (server/watch_writers.h).
  WatchWriters writers_{kWriterThreads};  // last: stopped first, after its queue ran
};

}  // namespace etcdq::server
