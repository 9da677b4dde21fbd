#include "server/watch_service.h"

#include <malloc.h>

#include <algorithm>
#include <deque>
#include <map>

namespace etcdq::server {

using etcdserverpb::WatchCreateRequest;
using etcdserverpb::WatchRequest;
using etcdserverpb::WatchResponse;

class WatchStream final : public grpc::ServerBidiReactor<WatchRequest, WatchResponse>, public mvcc::WatchSink {
 public:
  // What to do with gRPC next, decided under mu_ and done after releasing
  // it: gRPC may run OnWriteDone (or OnDone) inline inside StartWrite or
  // Finish, and those take mu_ (or delete this).
  struct Action {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    const WatchResponse* msg = nullptr;
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
  // `token`: the stream's auth token (its "token" metadata), resolved on
  // each create as etcd's isWatchPermitted does.
  WatchStream(WatchService* svc, Context* ctx, std::string token)
      : svc_(svc), ctx_(ctx), token_(std::move(token)) {
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed its sending side: its watches stay, as in etcd
      // (the stream ends when the call is canceled or the client goes).
      return;
    }
    switch (req_.request_union_case()) {
      case WatchRequest::kCreateRequest: create(req_.create_request()); break;
      case WatchRequest::kCancelRequest: cancel(req_.cancel_request().watch_id()); break;
      case WatchRequest::kProgressRequest: progress_request(); break;
      default: break;
    }
    StartRead(&req_);
  }

  void OnWriteDone(bool ok) override {
    Action a;
    bool drained;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      inflight_bytes_ = 0;
      if (!ok) {  // the client is gone: nothing more can be sent
        out_.clear();
        queued_bytes_ = 0;
        broken_ = true;
      } else {
        queued_bytes_ -= out_.front().second;
        out_.pop_front();
      }
      a = next_locked();
      drained = out_.empty() && !broken_;
    }
    // Drained: watchers that fell behind may catch up from storage now.
    if (drained) ctx_->store->watch_hub().wake();
    perform(a);  // may be the last use of this object
  }

  void OnCancel() override { close(grpc::Status::CANCELLED); }

  void OnDone() override {
    if (ctx_->queue_host) ctx_->queue_host->remove_all(this);
    WatchService* svc = svc_;
    size_t peak = peak_bytes_;
    svc->forget(this);
    delete this;
    svc->stream_closed(peak);
  }

  // --- mvcc::WatchSink (hub lock held) ---
  bool offer(mvcc::WatchBatch&& b) override {
    Action a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!offer_locked(std::move(b))) return false;
      a = next_locked();
    }
    perform(a);
    return true;
  }

  bool offer_locked(mvcc::WatchBatch&& b) {
    if (finishing_ || broken_) return true;  // nobody will read it; drop
    if (!b.cancel_reason.empty()) {
      if (watchers_.erase(b.watch_id) == 0) return true;
      WatchResponse r;
      r.set_watch_id(b.watch_id);
      r.set_canceled(true);
      r.set_cancel_reason(b.cancel_reason);
      header(&r, b.revision);
      enqueue(std::move(r));
      return true;
    }
    // The bound (kMaxQueuedBytes) holds for what this stream keeps: a batch
    // that does not fit waits in storage. Only a stream with nothing queued
    // takes a batch bigger than the bound (one revision can be, and it must
    // get through).
    if (!b.events.empty()) {
      size_t bytes = 0;
      for (const auto& ev : b.events) bytes += ev.ByteSizeLong();
      if (!fits_locked(bytes)) return false;
    }
    auto it = watchers_.find(b.watch_id);
    bool fragment = it != watchers_.end() && it->second.fragment;
    if (b.compact_revision != 0) {
      watchers_.erase(b.watch_id);
      WatchResponse r;
      r.set_watch_id(b.watch_id);
      r.set_canceled(true);
      r.set_compact_revision(b.compact_revision);
      header(&r, 0);
      enqueue(std::move(r));
      return true;
    }
    WatchResponse r;
    r.set_watch_id(b.watch_id);
    header(&r, b.revision);
    for (auto& ev : b.events) *r.add_events() = std::move(ev);
    if (fragment && static_cast<int64_t>(r.ByteSizeLong()) > fragment_limit()) {
      enqueue_fragments(std::move(r));
    } else {
      enqueue(std::move(r));
    }
    return true;
  }

  bool fits(size_t bytes) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return fits_locked(bytes);
  }

  bool fits_locked(size_t bytes) const {  // mu_ held
    if (finishing_ || broken_) return true;  // offer() drops it: no copy is kept
    return out_.empty() || held_bytes() + bytes <= WatchService::kMaxQueuedBytes;
  }

  // Room for catching up once a quarter of the bound is free: reading
  // storage for a sliver of room would mostly be thrown away by offer().
  size_t room() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finishing_ || broken_) return 0;
    size_t held = held_bytes();
    if (!out_.empty() && held > WatchService::kMaxQueuedBytes / 4 * 3) return 0;
    return held < WatchService::kMaxQueuedBytes ? WatchService::kMaxQueuedBytes - held : 0;
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
    for (int64_t id : ids) {
      if (!hub.is_synced(this, id)) continue;
      WatchResponse r;
      r.set_watch_id(id);
      header(&r, hub.revision());
      std::lock_guard<std::mutex> lock(mu_);
      if (watchers_.count(id)) enqueue(std::move(r));
    }
    std::lock_guard<std::mutex> lock(mu_);
    return next_locked();
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
    if (ctx_->queue_host) ctx_->queue_host->remove_all(this);
    std::lock_guard<std::mutex> lock(mu_);
    watchers_.clear();
    // Events queued but not yet written are dropped: the client resumes
    // after the last one it received, so it gets them again.
    if (!writing_) {
      out_.clear();
      queued_bytes_ = 0;
    } else {
      while (out_.size() > 1) {
        queued_bytes_ -= out_.back().second;
        out_.pop_back();
      }
    }
    finish_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, errors::stopped().message()));
    return next_locked();
  }

 private:
  struct Flags {
    bool fragment = false;
    bool progress_notify = false;
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
    if (member::caller_of_token(*ctx_, token_, &who)) return false;
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
        enqueue(std::move(r));
        a = next_locked();
      } else {
        r.set_watch_id(id);
        watchers_[id] = Flags{c.fragment(), c.progress_notify()};
        enqueue(std::move(r));  // `created` goes out before any event
        a = next_locked();
        added = true;
      }
    }
    perform(a);
    if (!added) return;
    // A queue consumer (QUEUES.md) gets the messages the leader assigns it,
    // not the changes of its key.
    if (!ctx_->queue_host || !ctx_->queue_host->watch_created(this, id, c.key(), c.range_end())) {
      hub.add(this, id, spec);
    }
  }

  void cancel(int64_t id) {
    auto& hub = ctx_->store->watch_hub();
    bool existed = hub.remove(this, id);
    if (ctx_->queue_host && ctx_->queue_host->remove(this, id)) existed = true;
    WatchResponse r;
    r.set_watch_id(id);
    r.set_canceled(true);
    header(&r, hub.revision());
    Action a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      existed = watchers_.erase(id) > 0 || existed;
      if (!existed) return;  // etcd answers nothing for an unknown id
      enqueue(std::move(r));
      a = next_locked();
    }
    perform(a);
  }

  void progress_request() {
    auto& hub = ctx_->store->watch_hub();
    if (!hub.all_synced(this)) return;  // etcd 3.5: only when every watcher is synced
    WatchResponse r;
    r.set_watch_id(-1);
    header(&r, hub.revision());
    Action a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      enqueue(std::move(r));
      a = next_locked();
    }
    perform(a);
  }

  // etcd splits only what its gRPC limit could not carry: --max-request-bytes
  // plus the 512 KiB allowance (grpcOverheadBytes in v3rpc's watch server).
  int64_t fragment_limit() const { return ctx_->limits.max_request_bytes + 512 * 1024; }

  void enqueue_fragments(WatchResponse&& whole) {
    size_t limit = static_cast<size_t>(fragment_limit());
    WatchResponse part;
    auto start = [&] {
      part.Clear();
      part.set_watch_id(whole.watch_id());
      *part.mutable_header() = whole.header();
    };
    start();
    for (int i = 0; i < whole.events_size(); ++i) {
      size_t ev = whole.events(i).ByteSizeLong();
      if (part.events_size() > 0 && part.ByteSizeLong() + ev + 8 > limit) {
        part.set_fragment(true);
        enqueue(std::move(part));
        start();
      }
      *part.add_events() = std::move(*whole.mutable_events(i));
    }
    enqueue(std::move(part));
  }

  void enqueue(WatchResponse&& r) {  // mu_ held
    if (broken_ || finishing_) return;
    size_t bytes = r.ByteSizeLong();
    out_.emplace_back(std::move(r), bytes);
    queued_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, held_bytes());
  }

  // What this stream holds: the queue, and gRPC's serialized copy of the
  // response being written (the response itself stays in out_ until
  // OnWriteDone, as StartWrite requires).
  size_t held_bytes() const { return queued_bytes_ + inflight_bytes_; }  // mu_ held

  Action next_locked() {  // mu_ held
    Action a;
    if (writing_ || finished_) return a;
    if (!out_.empty() && !broken_) {
      writing_ = true;
      inflight_bytes_ = out_.front().second;
      peak_bytes_ = std::max(peak_bytes_, held_bytes());
      a.kind = Action::kWrite;
      a.msg = &out_.front().first;  // a deque keeps its front in place on push_back
      // More queued behind this one: let gRPC send them together.
      if (out_.size() > 1) a.opts.set_buffer_hint();
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
    if (ctx_->queue_host) ctx_->queue_host->remove_all(this);
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
  const std::string token_;
  WatchRequest req_;
  mutable std::mutex mu_;  // guards everything below
  std::deque<std::pair<WatchResponse, size_t>> out_;
  size_t queued_bytes_ = 0;    // of out_, the response being written included
  size_t inflight_bytes_ = 0;  // gRPC's copy of the response being written
  size_t peak_bytes_ = 0;      // the most held_bytes() ever was
  bool writing_ = false;
  bool broken_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
  std::map<int64_t, Flags> watchers_;
  int64_t next_id_ = 0;
};

WatchService::WatchService(Context* ctx, std::chrono::milliseconds progress_interval)
    : ctx_(ctx), progress_interval_(progress_interval), progress_thread_([this] { progress_loop(); }) {}

WatchService::~WatchService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  progress_thread_.join();
}

grpc::ServerBidiReactor<WatchRequest, WatchResponse>* WatchService::Watch(grpc::CallbackServerContext* c) {
  if (ctx_->node->progress().is_learner) {
    return new RefusedStream<WatchRequest, WatchResponse>(to_grpc(errors::not_supported_for_learner()));
  }
  std::string token;
  const auto& md = c->client_metadata();
  auto it = md.find("token");
  if (it == md.end()) it = md.find("authorization");
  if (it != md.end()) token.assign(it->second.data(), std::min<size_t>(it->second.size(), 1024));
  auto* s = new WatchStream(this, ctx_, std::move(token));
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
  if (peak_bytes < kTrimAfterBytes) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    trim_wanted_ = true;
  }
  cv_.notify_all();
}

void WatchService::progress_loop() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kTrimGap = std::chrono::seconds(1);
  std::unique_lock<std::mutex> lock(mu_);
  auto next_progress = Clock::now() + progress_interval_;
  auto last_trim = Clock::now() - kTrimGap;
  while (!stopping_) {
    cv_.wait_until(lock, next_progress, [this] { return stopping_ || trim_wanted_; });
    if (stopping_) return;
    if (trim_wanted_) {
      // Streams often close together (a client process dies): wait a
      // little so one trim covers them, and never trim more than once a
      // second (malloc_trim walks every arena).
      auto at = std::max(Clock::now() + std::chrono::milliseconds(200), last_trim + kTrimGap);
      cv_.wait_until(lock, std::min(at, next_progress), [this] { return stopping_; });
      if (stopping_) return;
      if (Clock::now() >= at) {
        trim_wanted_ = false;
        lock.unlock();
        malloc_trim(0);
        lock.lock();
        last_trim = Clock::now();
      }
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
