// libraft's I/O (struct raft_io: the log, snapshots, messages, timers) as a
// part consensus::Node is given, so that consensus can run over something other
// than the network. Production: raft_uv (the log and snapshots in files in
// the Raft directory) with consensus/transport.h carrying messages over raw TCP
// behind the peer URL's listener. An in-process test keeps raft_uv and the consensus thread
// and swaps only the transport (tests/unit/memory_network.h), so that
// every byte of the real code path except the socket runs.
//
// Thread-safety: open(), get() and close() are called by whichever thread
// drives the node's loop at the time (Node::start() before the consensus
// thread runs, that thread after), never two at once; adopt() may be
// called from any thread. The node owns the object and destroys it after
// its loop closed.
#pragma once

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "consensus/forwarder.h"

namespace etcdq::consensus {

class RaftIo {
 public:
  virtual ~RaftIo() = default;
  // Opens the I/O for the Raft log in `dir` (which exists). Called once, by
  // Node::start(). Errors: the log cannot be opened (the message names dir).
  virtual Error open(const std::string& dir) = 0;
  // What raft_init takes; valid from a successful open() until close().
  virtual struct raft_io* get() = 0;
  // Frees what open() made, once the loop that ran it has returned (every
  // handle libraft opened is closed) or when raft_init never ran on it.
  // Not from raft_close's callback: see UvIo. Safe if open() failed.
  virtual void close() = 0;
  // Takes a connection the peer listener routed to libraft (it opened with
  // consensus::PeerTransport::kMagic; net/mux.h consumed nothing), from any
  // thread. An I/O whose messages travel some other way closes it.
  virtual void adopt(int fd);
  // Loop thread: who may send Raft messages here (PeerTransport's
  // set_sender_filter). An I/O without peers ignores it.
  virtual void set_sender_filter(std::function<bool(raft_id)> /*accepts*/) {}
};

// raft_uv on `loop` with messages through `transport`: the base of every
// RaftIo that keeps its log in files. `transport` must outlive it.
// A peer that could not be reached is dialled again after
// kConnectRetryDelayMs (etcd's rafthttp DialRetryFrequency, transport.go);
// libraft's own 1 s left a restarted follower unheard for up to a second.
//
// libraft 0.15 calls raft_io's close callback as soon as its request queues
// are empty (uvMaybeFireCloseCb, uv.c), not once its handles are closed: a
// segment writer closing under write load, or a peer stream, calls it
// again from its own close callback. So the callback reaches libraft once
// only (the second call would free the log and the address twice), and
// raft_uv_close, which frees the state those late callbacks read, waits
// for the loop to end (close()).
//
// Bounded sends: raft_uv writes each message straight to the member's
// socket (uv_write, uv_send.c), and what the kernel does not take waits in
// libuv's write queue, holding the log entries it carries (libraft keeps
// them referenced until the write's callback). A member that reads nothing
// (SIGSTOPped, or a link slower than the writes) made that grow with every
// entry the leader appended: the leader grew by 136-154 MB for 100 MB
// written (3 members, 4 KB puts), 40-53 MB more than its other follower. So
// UvIo counts, per member, the bytes of the messages it handed raft_uv whose
// write callback has not run; a message that would take that count over
// kMaxSendQueueBytes is not handed over (unless nothing is queued, so a
// message bigger than the bound still goes alone) and libraft's callback
// gets RAFT_NOCONNECTION from the loop, later, never from inside send: a
// non-zero return from raft_io's send turns some of libraft 0.15's callers
// unavailable. A failed AppendEntries puts that follower back to probing
// (replication.c, sendAppendEntriesCb), one append a heartbeat, so the
// leader sends it a snapshot once its log no longer reaches the follower.
// As etcd's rafthttp drops a message to a peer whose stream buffer is full
// and reports the peer unreachable (peer.go, send); each drop counts in
// etcd_network_peer_sent_failures_total{To}. A warning when a member's
// queue first reaches the bound, a line when it drains below half of it
// (both rate-limited).
class UvIo : public RaftIo {
 public:
  static constexpr unsigned kConnectRetryDelayMs = 100;
  // Bytes (about: message headers are estimated) of messages to one member
  // handed to raft_uv and not yet written to its socket.
  static constexpr size_t kMaxSendQueueBytes = 4 << 20;

  UvIo(uv_loop_t* loop, struct raft_uv_transport* transport) : loop_(loop), transport_(transport) {}
  Error open(const std::string& dir) override;
  struct raft_io* get() override { return &guarded_.io; }
  void close() override;

 private:
  // raft_io first, so that libraft's raft_io* leads back to the rest.
  struct Guarded {
    struct raft_io io;
    void (*uv_close)(struct raft_io*, raft_io_close_cb);  // raft_uv's own
    int (*uv_send)(struct raft_io*, struct raft_io_send*, const struct raft_message*, raft_io_send_cb);
    raft_io_close_cb raft_cb;                             // libraft's
    bool fired;
    UvIo* self;
  };
  // One send handed to raft_uv: libraft's req->data is kept here while
  // req->data points to this (raft_uv never reads it).
  struct Tracked {
    UvIo* self;
    void* data;
    raft_io_send_cb cb;
    raft_id to;
    size_t bytes;
  };
  struct SendQueue {
    size_t bytes = 0;      // handed to raft_uv, write not completed
    bool over = false;     // dropped since it last drained
    uint64_t dropped = 0;  // since it last drained
  };
  struct Dropped {
    struct raft_io_send* req;
    raft_io_send_cb cb;
  };
  static void sent(struct raft_io_send* req, int status);
  void drop(struct raft_io_send* req, raft_io_send_cb cb, raft_id to, SendQueue& q, size_t bytes);
  // Runs libraft's callbacks of the dropped sends with `status`.
  void answer_dropped(int status);
  static void close_once(struct raft_io* io, raft_io_close_cb cb);
  // raft_uv's send, telling libraft_patches when an InstallSnapshot goes
  // out (patch 6: snapshot_on_wire).
  static int send_noting(struct raft_io* io, struct raft_io_send* req, const struct raft_message* m,
                         raft_io_send_cb cb);

  uv_loop_t* loop_;
  struct raft_uv_transport* transport_;
  Guarded guarded_{};
  bool opened_ = false;
  std::unordered_map<raft_id, SendQueue> queues_;  // loop thread
  std::vector<Dropped> dropped_;                   // answered by drop_timer_
  uv_timer_t drop_timer_{};                        // made at the first drop
  bool drop_timer_open_ = false;
};

// Makes a node's I/O for its loop (which only runs after Node::start()).
// Called once, by Node's constructor.
using IoFactory = std::function<std::unique_ptr<RaftIo>(uv_loop_t* loop, std::shared_ptr<Forwarder> forwarder)>;

// The production I/O: raft_uv plus PeerTransport (consensus/transport.h);
// `tls_dial` is PeerTransport::Options::tls_dial (peer TLS; empty: plain).
std::unique_ptr<RaftIo> peer_uv_io(uv_loop_t* loop, std::shared_ptr<Forwarder> forwarder,
                                   std::function<void(int tcp, int plain, const std::string& host)> tls_dial = {});

}  // namespace etcdq::consensus
