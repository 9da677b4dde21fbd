#include "server/watch_service.h"

#include <algorithm>
#include <deque>
#include <map>
#include <unordered_map>

#include <grpcpp/impl/codegen/proto_utils.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <spdlog/spdlog.h>

#include "common/memory.h"
#include "server/watch_wire.h"

namespace etcdq::server {

using etcdserverpb::WatchCreateRequest;
using etcdserverpb::WatchRequest;
using etcdserverpb::WatchResponse;

class WatchStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                          public mvcc::WatchSink,
                          public Kickable {
 public:
  // What to do with gRPC next, decided under mu_ and done after releasing
  // it: gRPC may run OnWriteDone (or OnDone) inline inside StartWrite or
  // Finish, and those take mu_ (or delete this).
  struct Action {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    const grpc::ByteBuffer* msg = nullptr;
    grpc::WriteOptions opts;
    grpc::Status status;
  };

  void perform(const Action& a) {  // no lock held; Finish may delete this
    if (a.kind == Action::kWrite) {
      StartWrite(a.msg, a.opts);
    } else if (a.kind == Action::kFinish) {
      Finish(a.status);
    }
  }
  // `cred`: who the stream says it is (a token, or its TLS certificate's
  // Common Name), resolved on each create as etcd's isWatchPermitted does.
  WatchStream(WatchService* svc, Context* ctx, Credentials cred, grpc::CallbackServerContext* call)
      : svc_(svc), ctx_(ctx), cred_(std::move(cred)), call_(call) {
    // Taken now: gRPC no longer names it once the call is canceled.
    struct stat st {};
    if (int fd = socket_fd_of(call); fd >= 0 && ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
      socket_fd_ = fd;
      socket_ino_ = st.st_ino;
    }
    StartRead(&req_buf_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed its sending side: its watches stay, as in etcd
      // (the stream ends when the call is canceled or the client goes).
      return;
    }
    WatchRequest req;
    if (!grpc::SerializationTraits<WatchRequest>::Deserialize(&req_buf_, &req).ok()) {
      // As grpc-go ends etcd's stream on a message it cannot unmarshal
      // (reading on would leave the client waiting for an answer).
      close(grpc::Status(grpc::StatusCode::INTERNAL,
                         "grpc: failed to unmarshal the received message proto: cannot parse invalid wire-format data"));
      return;
    }
    switch (req.request_union_case()) {
      case WatchRequest::kCreateRequest: create(req.create_request()); break;
      case WatchRequest::kCancelRequest: cancel(req.cancel_request().watch_id()); break;
      case WatchRequest::kProgressRequest: progress_request(); break;
      default: break;
    }
    {
      // A client that sends requests but reads no answers (progress
      // requests, refused creates) would grow the queue without bound:
      // its next request waits until those answers have drained to half
      // (OnWriteDone), as etcd's recvLoop waits on its full ctrlStream.
      // Only answers to requests count: a reader slower than the events
      // still gets its cancels read.
      // Once all streams together hold too much, a stream keeps far less
      // of them (kControlBytesUnderPressure).
      std::lock_guard<std::mutex> lock(mu_);
      bool full = control_bytes_ >= WatchService::kMaxControlBytes ||
                  (control_bytes_ >= WatchService::kControlBytesUnderPressure &&
                   total() >= WatchService::kMaxTotalQueuedBytes);
      if (!finishing_ && !broken_ && full) {
        read_paused_ = true;
        return;
      }
    }
    StartRead(&req_buf_);
  }

  void OnWriteDone(bool ok) override {
    Action a;
    bool wake;
    bool resume_read;
    uint64_t written_below;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      inflight_bytes_ = 0;
      writing_buf_.Clear();
      if (!ok) {  // the client is gone: nothing more can be sent
        drop_queue_locked();
        broken_ = true;
      }
      sync_total_locked();
      // Everything before the next response in line is written (or
      // dropped): answers waiting on it may go (answer_gate.h).
      written_below = head_seq_;
      // The next write starts here, on gRPC's thread, with whatever was
      // queued meanwhile: no other thread is woken for it.
      a = next_locked();
      // A watcher that fell behind catches up once there is room; only
      // then is the hub's catch-up thread woken, not after every write.
      wake = starved_ && !broken_ && room_locked() > 0;
      if (wake) starved_ = false;
      // Streams refused for the total catch up once it is under it again.
      if (svc_->pressed_.load(std::memory_order_relaxed) && total() < WatchService::kMaxTotalQueuedBytes &&
          svc_->pressed_.exchange(false)) {
        wake = true;
      }
      resume_read = read_paused_ && !finishing_ && !broken_ && control_bytes_ <= WatchService::kMaxControlBytes / 2 &&
                    (control_bytes_ < WatchService::kControlBytesUnderPressure / 2 ||
                     total() < WatchService::kMaxTotalQueuedBytes);
      if (resume_read) read_paused_ = false;
    }
    track_->written(written_below);
    if (wake) ctx_->store->watch_hub().wake();
    // Before perform(): the write or Finish it starts may end the stream.
    if (resume_read) StartRead(&req_buf_);
    perform(a);  // may be the last use of this object
  }

  void OnCancel() override { close(grpc::Status::CANCELLED); }

  void OnDone() override {
    // Also here: a create that ran beside close() or shutdown() may have
    // added its watch after they emptied the hub of this stream.
    ctx_->store->watch_hub().remove_all(this);
    if (ctx_->plugins) ctx_->plugins->stream_closed(this);
    track_->close();  // nothing more is written here
    {
      std::lock_guard<std::mutex> lock(mu_);
      svc_->total_held_.fetch_sub(counted_, std::memory_order_relaxed);
      counted_ = 0;
    }
    WatchService* svc = svc_;
    size_t peak = peak_bytes_;
    svc->forget(this);
    delete this;
    svc->stream_closed(peak);
  }

  // --- Kickable: a writer thread starts the write this stream is ready for.
  void kick() override {
    Action a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      scheduled_ = false;
      a = next_locked();
    }
    perform(a);
  }

  // --- mvcc::WatchSink (hub or queue host lock held; never blocks) ---
  bool offer(const mvcc::WatchBatch& b) override {
    bool post;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!offer_locked(b)) return false;
      if (!b.events.empty()) note_for_answers_locked();
      post = schedule_locked();
    }
    // An idle stream starts its write on the apply thread once the hub
    // lock is released (no wake-up of a writer thread: the event leaves
    // before the put's answer, as etcd's does), for the first few streams
    // of a revision; the rest go to the writer threads.
    if (post && !mvcc::WatchHub::defer([](void* s) { static_cast<WatchStream*>(s)->kick(); }, this)) {
      svc_->writers_.post(this);
    }
    return true;
  }

  bool offer_locked(const mvcc::WatchBatch& b) {
    if (finishing_ || broken_) return true;  // nobody will read it; drop
    if (!b.cancel_reason.empty()) {
      if (watchers_.erase(b.watch_id) == 0) return true;
      WatchResponse r;
      r.set_watch_id(b.watch_id);
      r.set_canceled(true);
      r.set_cancel_reason(b.cancel_reason);
      header(&r, b.revision);
      enqueue_control(r);
      return true;
    }
    if (b.compact_revision != 0) {
      watchers_.erase(b.watch_id);
      WatchResponse r;
      r.set_watch_id(b.watch_id);
      r.set_canceled(true);
      r.set_compact_revision(b.compact_revision);
      header(&r, 0);
      enqueue_control(r);
      return true;
    }
    if (b.events.empty()) return true;
    size_t bytes = 0;
    for (const auto& ev : b.events) bytes += server::event_field_size(ev.bytes().size());
    // The bound (kMaxQueuedBytes) holds for what this stream keeps: a batch
    // that does not fit waits in storage. One revision may be bigger than
    // the room, and it must get through (fits_locked).
    bool one_revision = b.events.front().event->revision() == b.events.back().event->revision();
    if (!fits_locked(bytes, one_revision)) {
      starved_ = true;
      return false;
    }
    auto it = watchers_.find(b.watch_id);
    Flags* f = it != watchers_.end() ? &it->second : nullptr;
    if (f != nullptr && f->fragment && bytes + kMaxWirePrefix > static_cast<size_t>(fragment_limit())) {
      enqueue_fragments(b);
      f->open_seq = kNone;  // later events start a response of their own
      return true;
    }
    // Join the watcher's queued response if it has one and room: its
    // events stay in order and each revision stays whole. It is open while
    // not being written (seq >= head_seq_) and no control response was
    // queued after it (seq >= barrier_seq_).
    if (f != nullptr && f->open_seq != kNone && f->open_seq >= head_seq_ && f->open_seq >= barrier_seq_) {
      Out& q = out_[static_cast<size_t>(f->open_seq - head_seq_)];
      if (q.body.size() + bytes <= WatchService::kMergeBytes) {
        for (const auto& ev : b.events) append_event_field(&q.body, ev.bytes());
        q.revision = b.revision;
        add_queued(bytes);
        return true;
      }
    }
    Out& q = push_out(b.watch_id, b.revision);
    q.body.reserve(bytes);
    for (const auto& ev : b.events) append_event_field(&q.body, ev.bytes());
    add_queued(bytes + kMaxWirePrefix);
    if (f != nullptr) f->open_seq = q.seq;
    return true;
  }

  // The entry being applied answers its proposals once this stream has
  // written what it queued (answer_gate.h), unless nothing is queued or
  // the stream is behind: its write in flight looks stuck, or much waits
  // behind it. A client that reads slowly or not at all must not hold up
  // anyone's answers.
  void note_for_answers_locked() {  // mu_ held
    if (out_.empty() || broken_ || finishing_) return;
    if (queued_bytes_ > AnswerGate::kMaxQueuedToWait) return;
    if (writing_ && AnswerGate::Clock::now() - write_started_ > AnswerGate::kStalledWrite) return;
    AnswerGate::note(track_, head_seq_ + out_.size() - 1);
  }

  bool fits_locked(size_t bytes, bool one_revision) const {  // mu_ held
    size_t t = total();
    if (WatchService::takes(held_bytes(), out_.empty(), bytes, one_revision, t)) return true;
    if (t + bytes > WatchService::kMaxTotalQueuedBytes) svc_->pressed_.store(true, std::memory_order_relaxed);
    return false;
  }

  size_t room() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finishing_ || broken_) return 0;
    size_t r = room_locked();
    if (r == 0) {
      starved_ = true;  // OnWriteDone wakes the hub when there is
      if (total() >= WatchService::kMaxTotalQueuedBytes) svc_->pressed_.store(true, std::memory_order_relaxed);
    }
    return r;
  }

  size_t room_locked() const {  // mu_ held
    return WatchService::catch_up_room(held_bytes(), out_.empty(), total());
  }

  // What all streams hold (WatchService::total_held_).
  size_t total() const { return svc_->total_held_.load(std::memory_order_relaxed); }

  // Brings this stream's share of the total up to date (mu_ held): called
  // wherever held_bytes() changes.
  void sync_total_locked() {
    size_t now = held_bytes();
    if (now >= counted_) {
      svc_->total_held_.fetch_add(now - counted_, std::memory_order_relaxed);
    } else {
      svc_->total_held_.fetch_sub(counted_ - now, std::memory_order_relaxed);
    }
    counted_ = now;
  }

  // Progress for watchers that asked for it, while they are synced. Returns
  // what to start; the caller perform()s it once it holds no lock.
  Action progress_tick() {
    std::vector<int64_t> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, f] : watchers_) {
        if (f.progress_notify) ids.push_back(id);
      }
    }
    auto& hub = ctx_->store->watch_hub();
    WatchResponse r;
    ctx_->fill_header(r.mutable_header(), /*with_revision=*/false);
    for (int64_t id : ids) {
      r.set_watch_id(id);
      hub.if_synced(this, id, [&](int64_t revision) {
        r.mutable_header()->set_revision(revision);
        std::lock_guard<std::mutex> lock(mu_);
        // Dropped for a stream that is not reading, as etcd drops a
        // progress notification when the watcher's channel is full.
        if (watchers_.count(id) && room_locked() > 0) enqueue_control(r);
      });
    }
    std::lock_guard<std::mutex> lock(mu_);
    return next_locked();
  }

  // Eviction of a stream that does not read (WatchService::evict_stuck).
  // kCancel: its write has been in flight since `before`. kClose: it was
  // canceled by `close_before` and its write is still in flight, so the
  // bytes are in the socket, which its client does not read at all.
  enum class Evict { kNone, kCancel, kClose };
  // Reserves the stream for what it returns (the reservation holds off
  // Finish, so the stream outlives the caller's lock); the caller then
  // calls evict() holding no lock.
  Evict reserve_eviction(AnswerGate::Clock::time_point before, AnswerGate::Clock::time_point close_before) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writing_ || scheduled_ || finished_) return Evict::kNone;
    Evict how = Evict::kNone;
    if (evicted_at_ == AnswerGate::Clock::time_point{}) {
      if (write_started_ <= before && !finishing_ && !broken_) how = Evict::kCancel;
    } else if (evicted_at_ <= close_before && !connection_closed_) {
      how = Evict::kClose;
    }
    if (how == Evict::kCancel) evicted_at_ = AnswerGate::Clock::now();
    if (how == Evict::kClose) connection_closed_ = true;
    if (how != Evict::kNone) scheduled_ = true;
    return how;
  }
  // kCancel: the stuck write fails (what gRPC holds behind HTTP/2 flow
  // control is dropped) and the client sees CANCELLED: gRPC sends a reset,
  // which flow control does not hold back (a status would wait behind the
  // write). kClose: shuts the connection's socket (gRPC names it "fd:N"
  // at the start of the call: net/mux.h hands every connection over),
  // which ends every stream on it; checked to be the same socket still.
  void evict(Evict how) {
    if (how == Evict::kCancel) {
      call_->TryCancel();
    } else if (how == Evict::kClose) {
      // The socket the stream started on, if that descriptor is still it.
      struct stat st {};
      if (socket_fd_ >= 0 && ::fstat(socket_fd_, &st) == 0 && st.st_ino == socket_ino_) {
        ::shutdown(socket_fd_, SHUT_RDWR);
      }
    }
    kick();  // ends the reservation; may be the last use of this object
  }

  // Ends the stream with Unavailable "etcdserver: server stopped" and no
  // cancel responses, as a stopping etcd does (its connection goes away:
  // the client sees Unavailable and nothing else). etcd's clients treat
  // Unavailable as "right back" and open the watches again from the
  // revision after the last one they saw (clientv3's watchGrpcStream:
  // isHaltErr is false for codes.Unavailable), whereas a canceled response
  // ends a client's watch for good. Returns what to start; the caller
  // perform()s it once it holds no lock (this object stays alive until
  // then: the write or Finish it names is reserved for it).
  Action shutdown() {
    ctx_->store->watch_hub().remove_all(this);
    if (ctx_->plugins) ctx_->plugins->stream_closed(this);
    track_->close();  // its queue is dropped below
    std::lock_guard<std::mutex> lock(mu_);
    watchers_.clear();
    // Events queued but not yet written are dropped: the client resumes
    // after the last one it received, so it gets them again.
    drop_queue_locked();
    finish_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, errors::stopped().message()));
    return next_locked();
  }

 private:
  static constexpr uint64_t kNone = UINT64_MAX;
  struct Flags {
    bool fragment = false;
    bool progress_notify = false;
    uint64_t open_seq = kNone;  // this watcher's last events response (see offer_locked)
  };

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
    size_t bytes = 0;  // what it counts in queued_bytes_
  };

  // revision 0: none, as etcd sends for a compacted watcher's cancel.
  void header(WatchResponse* r, int64_t revision) {
    r->mutable_header()->set_revision(revision);
    ctx_->fill_header(r->mutable_header(), /*with_revision=*/revision != 0);
  }

  // etcd's isWatchPermitted: READ over the watched range.
  bool permitted(const WatchCreateRequest& c) const {
    if (ctx_->auth == nullptr || !ctx_->auth->enabled()) return true;
    auth::Caller who;
    if (caller_of(*ctx_, cred_, &who)) return false;
    return !member::check_read(*ctx_, who, c.key(), c.range_end());
  }

  void create(const WatchCreateRequest& c) {
    bool allowed = permitted(c);
    auto& hub = ctx_->store->watch_hub();
    int64_t rev = hub.revision();
    std::string end = c.range_end();
    mvcc::WatchSpec spec;
    spec.key = c.key();
    spec.end = end;
    ctx_->keys->read_range(&spec.key, &spec.end);
    spec.start_revision = c.start_revision() > 0 ? c.start_revision() : rev + 1;
    spec.prev_kv = c.prev_kv();
    spec.progress_from = c.start_revision() > 0 ? c.start_revision() : 0;
    for (int f : c.filters()) {
      if (f == WatchCreateRequest::NOPUT) spec.no_put = true;
      if (f == WatchCreateRequest::NODELETE) spec.no_delete = true;
    }
    WatchResponse r;
    r.set_created(true);
    header(&r, rev);
    int64_t id = -1;
    Action a;
    bool added = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::string err;
      bool from_key = end.size() == 1 && end[0] == '\0';
      if (!end.empty() && !from_key && c.key() >= end) {
        err = "mvcc: watcher range is empty";
      }
      if (err.empty() && !allowed) {
        // etcd's cancel reason is the gRPC error's text.
        err = "rpc error: code = PermissionDenied desc = " + errors::permission_denied().message();
      }
      if (err.empty() && c.watch_id() != 0) {
        id = c.watch_id();
        if (watchers_.count(id)) err = "mvcc: duplicate watch ID provided on the WatchStream";
      } else if (err.empty()) {
        // A rejected create takes no id (etcd checks the range first).
        while (watchers_.count(next_id_)) ++next_id_;
        id = next_id_++;
      }
      if (!err.empty()) {
        r.set_watch_id(-1);
        r.set_canceled(true);
        r.set_cancel_reason(err);
        enqueue_control(r);
        a = next_locked();
      } else {
        r.set_watch_id(id);
        watchers_[id] = Flags{c.fragment(), c.progress_notify(), kNone};
        enqueue_control(r);  // `created` goes out before any event
        a = next_locked();
        added = true;
      }
    }
    perform(a);
    if (!added) return;
    // A key-space plug-in may take the watch (a queue consumer gets the
    // messages the leader assigns it, not the changes of its key).
    if (!ctx_->plugins || !ctx_->plugins->watch_created(this, id, c.key(), c.range_end())) {
      hub.add(this, id, spec);
    }
  }

  void cancel(int64_t id) {
    auto& hub = ctx_->store->watch_hub();
    bool existed = hub.remove(this, id);
    if (ctx_->plugins && ctx_->plugins->watch_canceled(this, id)) existed = true;
    WatchResponse r;
    r.set_watch_id(id);
    r.set_canceled(true);
    header(&r, hub.revision());
    Action a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      existed = watchers_.erase(id) > 0 || existed;
      if (!existed) return;  // etcd answers nothing for an unknown id
      enqueue_control(r);
      a = next_locked();
    }
    perform(a);
  }

  void progress_request() {
    WatchResponse r;
    r.set_watch_id(-1);
    ctx_->fill_header(r.mutable_header(), /*with_revision=*/false);
    // Only if every watcher is synced now (etcd 3.6: otherwise the request
    // is dropped and the client asks again; WatchHub::if_all_synced). Under
    // the hub lock, so the write starts on a writer thread, as for an offer.
    ctx_->store->watch_hub().if_all_synced(this, [this, &r](int64_t revision) {
      r.mutable_header()->set_revision(revision);
      bool post;
      {
        std::lock_guard<std::mutex> lock(mu_);
        enqueue_control(r);
        post = schedule_locked();
      }
      if (post) svc_->writers_.post(this);
    });
  }

  // etcd splits only what its gRPC limit could not carry: --max-request-bytes
  // plus the 512 KiB allowance (grpcOverheadBytes in v3rpc's watch server).
  int64_t fragment_limit() const { return ctx_->limits.max_request_bytes + 512 * 1024; }

  // One revision (or a catch-up step) too big for one response: parts of
  // whole events, each but the last marked `fragment`. mu_ held.
  void enqueue_fragments(const mvcc::WatchBatch& b) {
    size_t limit = static_cast<size_t>(fragment_limit());
    Out* part = nullptr;
    for (const auto& ev : b.events) {
      size_t n = event_field_size(ev.bytes().size());
      if (part != nullptr && !part->body.empty() && kMaxWirePrefix + part->body.size() + n > limit) {
        part->fragment = true;
        add_queued(part->body.size() + kMaxWirePrefix);
        part = nullptr;
      }
      if (part == nullptr) part = &push_out(b.watch_id, b.revision);
      append_event_field(&part->body, ev.bytes());
    }
    add_queued(part->body.size() + kMaxWirePrefix);
  }

  Out& push_out(int64_t watch_id, int64_t revision) {  // mu_ held
    Out& q = out_.emplace_back();
    q.seq = head_seq_ + out_.size() - 1;
    q.watch_id = watch_id;
    q.revision = revision;
    return q;
  }

  void add_queued(size_t bytes) {  // mu_ held; to the last response pushed or joined
    queued_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, held_bytes());
    sync_total_locked();
  }

  // created, canceled and progress responses, serialized as they are. Any
  // of them ends joining: a progress response says every event up to its
  // revision was sent, so no later event may join a response before it.
  void enqueue_control(const WatchResponse& r) {  // mu_ held
    if (broken_ || finishing_) return;
    Out& q = push_out(r.watch_id(), 0);
    q.whole = true;
    r.SerializeToString(&q.body);
    // With the allowance an event response gets: it also stands for the
    // entry's own memory, so many tiny responses are bounded too.
    q.bytes = q.body.size() + kMaxWirePrefix;
    queued_bytes_ += q.bytes;
    control_bytes_ += q.bytes;
    peak_bytes_ = std::max(peak_bytes_, held_bytes());
    sync_total_locked();
    barrier_seq_ = q.seq + 1;
  }

  void drop_queue_locked() {  // mu_ held
    head_seq_ += out_.size();
    out_.clear();
    queued_bytes_ = 0;
    control_bytes_ = 0;
    sync_total_locked();
  }

  // What this stream holds: the queue, and the response being written.
  size_t held_bytes() const { return queued_bytes_ + inflight_bytes_; }  // mu_ held

  // Whether a writer thread must be asked to start a write (mu_ held).
  bool schedule_locked() {
    if (writing_ || scheduled_ || finished_ || out_.empty()) return false;
    scheduled_ = true;
    return true;
  }

  Action next_locked() {  // mu_ held
    Action a;
    if (writing_ || scheduled_ || finished_) return a;
    if (!out_.empty() && !broken_) {
      Out& q = out_.front();
      size_t counted = q.whole ? q.bytes : q.body.size() + kMaxWirePrefix;
      if (q.whole) {
        grpc::Slice s(q.body.data(), q.body.size());
        writing_buf_ = grpc::ByteBuffer(&s, 1);
      } else {
        WireHeader h;
        h.cluster_id = ctx_->current_cluster_id();
        h.member_id = ctx_->self.id;
        h.revision = q.revision;
        h.raft_term = ctx_->node->progress().term;
        writing_buf_ = encode_watch_response(h, q.watch_id, q.fragment, &q.body);
      }
      queued_bytes_ -= std::min(queued_bytes_, counted);
      if (q.whole) control_bytes_ -= std::min(control_bytes_, counted);
      inflight_bytes_ = counted;
      sync_total_locked();
      out_.pop_front();
      ++head_seq_;
      writing_ = true;
      write_started_ = AnswerGate::Clock::now();
      a.kind = Action::kWrite;
      a.msg = &writing_buf_;
      // More queued behind this one: let gRPC send them together.
      if (!out_.empty()) a.opts.set_buffer_hint();
      return a;
    }
    if (finishing_) {
      finished_ = true;
      a.kind = Action::kFinish;
      a.status = final_status_;
    }
    return a;
  }

  void finish_locked(grpc::Status s) {  // mu_ held; next_locked() finishes
    if (finishing_) return;
    finishing_ = true;
    final_status_ = std::move(s);
  }

  void close(grpc::Status s) {
    ctx_->store->watch_hub().remove_all(this);
    if (ctx_->plugins) ctx_->plugins->stream_closed(this);
    Action a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      watchers_.clear();
      finish_locked(std::move(s));
      a = next_locked();
    }
    perform(a);
  }

  WatchService* svc_;
  Context* ctx_;
  const Credentials cred_;
  grpc::CallbackServerContext* const call_;  // gRPC's, alive until OnDone
  AnswerGate::Clock::time_point evicted_at_{};  // canceled for not reading
  int socket_fd_ = -1;  // the connection's socket, and its inode
  ino_t socket_ino_ = 0;
  bool connection_closed_ = false;
  grpc::ByteBuffer req_buf_;
  mutable std::mutex mu_;  // guards everything below
  std::deque<Out> out_;
  uint64_t head_seq_ = 0;  // seq of out_.front()
  uint64_t barrier_seq_ = 0;  // no response before this seq takes more events
  grpc::ByteBuffer writing_buf_;  // the response being written
  size_t queued_bytes_ = 0;    // of out_
  size_t control_bytes_ = 0;   // of out_'s control responses (whole)
  size_t inflight_bytes_ = 0;  // of writing_buf_
  size_t peak_bytes_ = 0;      // the most held_bytes() ever was
  size_t counted_ = 0;         // what this stream adds to WatchService::total_held_
  bool writing_ = false;
  AnswerGate::Clock::time_point write_started_;  // of the write in flight
  // Where this stream's writes are, for the answers waiting on them.
  const std::shared_ptr<AnswerGate::Track> track_ = std::make_shared<AnswerGate::Track>();
  bool scheduled_ = false;  // posted to the writer threads (holds off writes and Finish)
  mutable bool starved_ = false;  // refused events or had no room: wake the hub when there is
  bool broken_ = false;
  bool finishing_ = false;
  bool read_paused_ = false;  // no read outstanding until the queue drains
  bool finished_ = false;
  grpc::Status final_status_;
  std::map<int64_t, Flags> watchers_;
  int64_t next_id_ = 0;
};

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
