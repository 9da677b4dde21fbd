// One client's Watch call (watch_service.h): the gRPC reactor, and the
// sink the hub hands its watchers' events to. Its parts, each with its
// own role:
//   watch_request.h    decoding a request, what a create asks for, and
//                      whether it is refused;
//   stream_watchers.h  this stream's watchers by id;
//   watch_outbox.h     the responses queued for the client and the bytes
//                      they hold (the one place events become bytes);
//   watch_flow.h       its flow control: what it takes, what catching up
//                      reads for it, when it stops reading requests;
//   watch_writers.h    the threads that start a write on an idle stream;
//   member/answer_gate.h  the answers waiting until this stream has
//                      written an entry's events.
// What is left here is the reactor: one read outstanding, one write in
// flight, requests acted on, progress, eviction, and the stream's end.
//
// Thread-safety: gRPC's callbacks, the hub's offer() and room() (hub or
// plug-in lock held; never blocks), the writer threads' kick() and the
// service's calls (under its own lock) may all run at once; mu_ guards
// the state. gRPC may run OnWriteDone or OnDone inline inside StartWrite
// or Finish, so those start only after mu_ is released (Action).
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <memory>
#include <mutex>

#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "member/watches.h"
#include "member/answer_gate.h"
#include "server/context.h"
#include "server/stream_watchers.h"
#include "server/watch_flow.h"
#include "server/watch_outbox.h"
#include "server/watch_writers.h"

namespace etcdq::server {

using member::AnswerGate;

class WatchService;

class WatchStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                          public member::WatchSink,
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
  void perform(const Action& a);  // no lock held; Finish may delete this

  // `cred`: who the stream says it is (a token, or its TLS certificate's
  // Common Name), resolved on each create as etcd's isWatchPermitted does.
  WatchStream(WatchService* svc, Context* ctx, Credentials cred, grpc::CallbackServerContext* call);

  // --- gRPC ---
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // --- Kickable: a writer thread starts the write this stream is ready for.
  void kick() override;

  // --- member::WatchSink (hub or plug-in lock held; never blocks) ---
  bool offer(const member::WatchBatch& b) override;
  size_t room() const override;
  bool write_stalled_for(std::chrono::steady_clock::duration d) const override;

  // --- WatchService (its lock held; the caller perform()s what is
  // returned once it holds no lock, and this object stays alive until
  // then: the write or Finish it names is reserved for it) ---
  // Progress for watchers that asked for it, while they are synced.
  Action progress_tick();
  // Ends the stream with Unavailable "etcdserver: server stopped" and no
  // cancel responses, as a stopping etcd does (its connection goes away:
  // the client sees Unavailable and nothing else). etcd's clients treat
  // Unavailable as "right back" and open the watches again from the
  // revision after the last one they saw (clientv3's watchGrpcStream:
  // isHaltErr is false for codes.Unavailable), whereas a canceled response
  // ends a client's watch for good.
  Action shutdown();
  // The same end with Unavailable "etcdserver: no leader", for a stream
  // whose client asked for a leader ("hasleader: true"): the member has
  // had none for a while (leader_monitor.h). kNone for any other stream.
  Action end_for_no_leader();
  // Eviction of a stream that does not read (WatchService::evict_stuck).
  // kCancel: its write has been in flight since `before`. kClose: it was
  // canceled by `close_before` and its write is still in flight, so the
  // bytes are in the socket, which its client does not read at all.
  enum class Evict { kNone, kCancel, kClose };
  // Reserves the stream for what it returns (the reservation holds off
  // Finish, so the stream outlives the caller's lock); the caller then
  // calls evict() holding no lock.
  Evict reserve_eviction(AnswerGate::Clock::time_point before, AnswerGate::Clock::time_point close_before);
  // kCancel: the stuck write fails (what gRPC holds behind HTTP/2 flow
  // control is dropped) and the client sees CANCELLED: gRPC sends a reset,
  // which flow control does not hold back (a status would wait behind the
  // write). kClose: shuts the connection's socket (gRPC names it "fd:N"
  // at the start of the call: net/mux.h hands every connection over),
  // which ends every stream on it; checked to be the same socket still.
  void evict(Evict how);

 private:
  // Requests (OnReadDone).
  void create(const etcdserverpb::WatchCreateRequest& c);
  void cancel(int64_t id);
  void progress_request();
  // The hub's batch for one watcher (mu_ held); false: no room.
  bool offer_locked(const member::WatchBatch& b);
  void note_for_answers_locked();
  void header(etcdserverpb::WatchResponse* r, int64_t revision);
  void enqueue_control(const etcdserverpb::WatchResponse& r);  // mu_ held
  bool schedule_locked();
  Action next_locked();
  void finish_locked(grpc::Status s);
  void close(grpc::Status s);
  // Ends the stream with `s` and no cancel responses (shutdown()).
  Action end(grpc::Status s);

  WatchService* svc_;
  Context* ctx_;
  const Credentials cred_;
  grpc::CallbackServerContext* const call_;  // gRPC's, alive until OnDone
  AnswerGate::Clock::time_point evicted_at_{};  // canceled for not reading
  int socket_fd_ = -1;  // the connection's socket, and its inode
  ino_t socket_ino_ = 0;
  bool connection_closed_ = false;
  bool requires_leader_ = false;  // its metadata says "hasleader: true"
  grpc::ByteBuffer req_buf_;
  mutable std::mutex mu_;  // guards everything below
  WatchOutbox outbox_;
  mutable StreamFlow flow_;  // room() is const for the hub
  StreamWatchers watchers_;
  bool writing_ = false;
  AnswerGate::Clock::time_point write_started_;  // of the write in flight
  // Where this stream's writes are, for the answers waiting on them.
  const std::shared_ptr<AnswerGate::Track> track_ = std::make_shared<AnswerGate::Track>();
  bool scheduled_ = false;  // posted to the writer threads (holds off writes and Finish)
  bool broken_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
};

}  // namespace etcdq::server
