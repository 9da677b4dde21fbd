#include "server/watch_stream.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "server/watch_request.h"
#include "server/watch_service.h"

namespace etcdq::server {

using etcdserverpb::WatchCreateRequest;
using etcdserverpb::WatchRequest;
using etcdserverpb::WatchResponse;

WatchStream::WatchStream(WatchService* svc, Context* ctx, Credentials cred, grpc::CallbackServerContext* call)
    : svc_(svc),
      ctx_(ctx),
      cred_(std::move(cred)),
      call_(call),
      outbox_(&svc->total_held_),
      flow_(&svc->total_held_, &svc->pressed_) {
  // Taken now: gRPC no longer names it once the call is canceled.
  struct stat st {};
  if (int fd = socket_fd_of(call); fd >= 0 && ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
    socket_fd_ = fd;
    socket_ino_ = st.st_ino;
  }
  // As etcd's stream interceptor reads it: the first value only.
  const auto& md = call->client_metadata();
  auto hl = md.find("hasleader");
  requires_leader_ = hl != md.end() && hl->second == "true";
  StartRead(&req_buf_);
}

void WatchStream::perform(const Action& a) {
  if (a.kind == Action::kWrite) {
    StartWrite(a.msg, a.opts);
  } else if (a.kind == Action::kFinish) {
    Finish(a.status);
  }
}

void WatchStream::OnReadDone(bool ok) {
  if (!ok) {
    // The client closed its sending side: its watches stay, as in etcd
    // (the stream ends when the call is canceled or the client goes).
    return;
  }
  WatchRequest req;
  if (grpc::Status bad = decode_watch_request(&req_buf_, &req); !bad.ok()) {
    // Reading on would leave the client waiting for an answer.
    close(std::move(bad));
    return;
  }
  switch (req.request_union_case()) {
    case WatchRequest::kCreateRequest: create(req.create_request()); break;
    case WatchRequest::kCancelRequest: cancel(req.cancel_request().watch_id()); break;
    case WatchRequest::kProgressRequest: progress_request(); break;
    default: break;
  }
  {
    // The next request waits while the client's answers pile up
    // (watch_flow.h); OnWriteDone reads again.
    std::lock_guard<std::mutex> lock(mu_);
    if (!finishing_ && !broken_ && flow_.pause_reads(outbox_)) return;
  }
  StartRead(&req_buf_);
}

void WatchStream::OnWriteDone(bool ok) {
  Action a;
  bool wake;
  bool resume_read;
  uint64_t written_below;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    outbox_.write_done();
    if (!ok) {  // the client is gone: nothing more can be sent
      outbox_.drop();
      broken_ = true;
    }
    // Everything before the next response in line is written (or
    // dropped): answers waiting on it may go (member/answer_gate.h).
    written_below = outbox_.head_seq();
    // The next write starts here, on gRPC's thread, with whatever was
    // queued meanwhile: no other thread is woken for it.
    a = next_locked();
    wake = flow_.wake_after_write(outbox_, broken_);
    resume_read = flow_.resume_reads(outbox_, !finishing_ && !broken_);
  }
  track_->written(written_below);
  if (wake) member::watches::wake(*ctx_);
  // Before perform(): the write or Finish it starts may end the stream.
  if (resume_read) StartRead(&req_buf_);
  perform(a);  // may be the last use of this object
}

void WatchStream::OnCancel() { close(grpc::Status::CANCELLED); }

void WatchStream::OnDone() {
  // Also here: a create that ran beside close() or shutdown() may have
  // added its watch after they emptied the hub of this stream.
  member::watches::close(*ctx_, this);
  track_->close();  // nothing more is written here
  {
    std::lock_guard<std::mutex> lock(mu_);
    outbox_.release();
  }
  WatchService* svc = svc_;
  size_t peak = outbox_.peak_bytes();
  svc->forget(this);
  delete this;
  svc->stream_closed(peak);
}

void WatchStream::kick() {
  Action a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    scheduled_ = false;
    a = next_locked();
  }
  perform(a);
}

bool WatchStream::offer(const member::WatchBatch& b) {
  bool post;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!offer_locked(b)) return false;
    if (!b.events.empty() && b.holds_answers) note_for_answers_locked();
    post = schedule_locked();
  }
  // An idle stream starts its write once the hub has dispatched the whole
  // apply pass (its watchers' events then go out in one response): on the
  // apply thread once the hub lock is released for the first few streams
  // of a pass (no wake-up of a writer thread: the event leaves before the
  // put's answer, as etcd's does), on the writer threads for the rest.
  // Outside a pass (catch-up, queue deliveries) the writer threads start it.
  auto start = [](void* arg, bool here) {
    auto* s = static_cast<WatchStream*>(arg);
    if (here) {
      s->kick();
    } else {
      s->svc_->writers_.post(s);
    }
  };
  if (post && !member::watches::defer(start, this)) svc_->writers_.post(this);
  return true;
}

bool WatchStream::offer_locked(const member::WatchBatch& b) {
  if (finishing_ || broken_) return true;  // nobody will read it; drop
  if (!b.cancel_reason.empty()) {
    if (!watchers_.remove(b.watch_id)) return true;
    WatchResponse r;
    r.set_watch_id(b.watch_id);
    r.set_canceled(true);
    r.set_cancel_reason(b.cancel_reason);
    header(&r, b.revision);
    enqueue_control(r);
    return true;
  }
  if (b.compact_revision != 0) {
    watchers_.remove(b.watch_id);
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
  for (const auto& ev : b.events) bytes += event_field_size(ev.bytes().size());
  // The bound (kMaxQueuedBytes) holds for what this stream keeps: a batch
  // that does not fit waits in storage. One revision may be bigger than
  // the room, and it must get through (fits_locked).
  bool one_revision = b.events.front().event->revision() == b.events.back().event->revision();
  if (!flow_.takes(outbox_, bytes, one_revision)) return false;
  StreamWatchers::Watcher* w = watchers_.find(b.watch_id);
  outbox_.add_events(b, w != nullptr && w->fragment, static_cast<size_t>(fragment_limit(*ctx_)),
                     w != nullptr ? &w->open_seq : nullptr);
  return true;
}

// The entry being applied answers its proposals once this stream has
// written what it queued (member/answer_gate.h), unless nothing is queued or the
// stream is behind: its write in flight looks stuck, or much waits behind
// it. A client that reads slowly or not at all must not hold up anyone's
// answers.
void WatchStream::note_for_answers_locked() {
  if (outbox_.empty() || broken_ || finishing_) return;
  if (outbox_.queued_bytes() > AnswerGate::kMaxQueuedToWait) return;
  if (writing_ && AnswerGate::Clock::now() - write_started_ > AnswerGate::kStalledWrite) return;
  AnswerGate::note(track_, outbox_.last_seq());
}

size_t WatchStream::room() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (finishing_ || broken_) return 0;
  return flow_.room(outbox_);
}

bool WatchStream::write_stalled_for(std::chrono::steady_clock::duration d) const {
  std::lock_guard<std::mutex> lock(mu_);
  return writing_ && !finishing_ && !broken_ && AnswerGate::Clock::now() - write_started_ >= d;
}

WatchStream::Action WatchStream::progress_tick() {
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ids = watchers_.progress_notify_ids();
  }
  WatchResponse r;
  ctx_->fill_header(r.mutable_header(), /*with_revision=*/false);
  for (int64_t id : ids) {
    r.set_watch_id(id);
    member::watches::if_synced(*ctx_, this, id, [&](int64_t revision) {
      r.mutable_header()->set_revision(revision);
      std::lock_guard<std::mutex> lock(mu_);
      // Dropped for a stream that is not reading, as etcd drops a progress
      // notification when the watcher's channel is full.
      if (watchers_.contains(id) && flow_.catch_up_room(outbox_) > 0) enqueue_control(r);
    });
  }
  std::lock_guard<std::mutex> lock(mu_);
  return next_locked();
}

WatchStream::Evict WatchStream::reserve_eviction(AnswerGate::Clock::time_point before,
                                                 AnswerGate::Clock::time_point close_before) {
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

void WatchStream::evict(Evict how) {
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

WatchStream::Action WatchStream::shutdown() {
  return end(grpc::Status(grpc::StatusCode::UNAVAILABLE, errors::stopped().message()));
}

WatchStream::Action WatchStream::end_for_no_leader() {
  if (!requires_leader_) return {};
  return end(grpc::Status(grpc::StatusCode::UNAVAILABLE, errors::no_leader().message()));
}

WatchStream::Action WatchStream::end(grpc::Status s) {
  member::watches::close(*ctx_, this);
  track_->close();  // its queue is dropped below
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.clear();
  // Events queued but not yet written are dropped: the client resumes
  // after the last one it received, so it gets them again.
  outbox_.drop();
  finish_locked(std::move(s));
  return next_locked();
}

// revision 0: none, as etcd sends for a compacted watcher's cancel.
void WatchStream::header(WatchResponse* r, int64_t revision) {
  r->mutable_header()->set_revision(revision);
  ctx_->fill_header(r->mutable_header(), /*with_revision=*/revision != 0);
}

void WatchStream::create(const WatchCreateRequest& c) {
  bool allowed = watch_permitted(*ctx_, cred_, c);
  int64_t rev = member::watches::revision(*ctx_);
  member::WatchSpec spec = member::watches::spec_of(*ctx_, c, rev);
  WatchResponse r;
  r.set_created(true);
  header(&r, rev);
  int64_t id = -1;
  Action a;
  bool added = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string err = create_refusal(c, allowed);
    if (err.empty()) {
      err = watchers_.add(c.watch_id(), StreamWatchers::Watcher{c.fragment(), c.progress_notify()}, &id);
    }
    if (!err.empty()) {
      r.set_watch_id(-1);
      r.set_canceled(true);
      r.set_cancel_reason(err);
      enqueue_control(r);
      a = next_locked();
    } else {
      r.set_watch_id(id);
      enqueue_control(r);  // `created` goes out before any event
      a = next_locked();
      added = true;
    }
  }
  perform(a);
  if (!added) return;
  // A key-space plug-in may take the watch (a queue consumer gets the
  // messages the leader assigns it, not the changes of its key).
  member::watches::create(*ctx_, this, id, c, spec);
}

void WatchStream::cancel(int64_t id) {
  bool existed = member::watches::cancel(*ctx_, this, id);
  WatchResponse r;
  r.set_watch_id(id);
  r.set_canceled(true);
  header(&r, member::watches::revision(*ctx_));
  Action a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    existed = watchers_.remove(id) || existed;
    if (!existed) return;  // etcd answers nothing for an unknown id
    enqueue_control(r);
    a = next_locked();
  }
  perform(a);
}

void WatchStream::progress_request() {
  WatchResponse r;
  r.set_watch_id(-1);
  ctx_->fill_header(r.mutable_header(), /*with_revision=*/false);
  // Only if every watcher is synced now (etcd 3.6: otherwise the request
  // is dropped and the client asks again; WatchHub::if_all_synced). Under
  // the hub lock, so the write starts on a writer thread, as for an offer.
  member::watches::if_all_synced(*ctx_, this, [this, &r](int64_t revision) {
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

void WatchStream::enqueue_control(const WatchResponse& r) {
  if (broken_ || finishing_) return;
  outbox_.add_control(r);
}

// Whether a writer thread must be asked to start a write (mu_ held).
bool WatchStream::schedule_locked() {
  if (writing_ || scheduled_ || finished_ || outbox_.empty()) return false;
  scheduled_ = true;
  return true;
}

WatchStream::Action WatchStream::next_locked() {
  Action a;
  if (writing_ || scheduled_ || finished_) return a;
  if (!outbox_.empty() && !broken_) {
    WireHeader h;
    if (outbox_.front_is_events()) {
      h.cluster_id = ctx_->current_cluster_id();
      h.member_id = ctx_->self.id;
      h.raft_term = ctx_->consensus->progress().term;
    }
    a.msg = outbox_.start_write(h);
    writing_ = true;
    write_started_ = AnswerGate::Clock::now();
    a.kind = Action::kWrite;
    // More queued behind this one: let gRPC send them together.
    if (!outbox_.empty()) a.opts.set_buffer_hint();
    return a;
  }
  if (finishing_) {
    finished_ = true;
    a.kind = Action::kFinish;
    a.status = final_status_;
  }
  return a;
}

void WatchStream::finish_locked(grpc::Status s) {  // next_locked() finishes
  if (finishing_) return;
  finishing_ = true;
  final_status_ = std::move(s);
}

void WatchStream::close(grpc::Status s) {
  member::watches::close(*ctx_, this);
  Action a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    watchers_.clear();
    finish_locked(std::move(s));
    a = next_locked();
  }
  perform(a);
}

}  // namespace etcdq::server
