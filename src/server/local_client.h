// An in-process etcd client for the services etcd itself builds on its
// client library (v3lock and v3election use clientv3's concurrency
// recipes): Txn, Range, Delete and single-key watches, with the same
// validation, proposal and read paths as a remote client's calls.
//
// Every callback runs on the client's own executor thread, one at a time,
// so a recipe's state needs no lock of its own. Callbacks must not block.
#pragma once

#include <functional>
#include <memory>

#include "common/executor.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "server/context.h"

namespace etcdq::server {

class LocalClient {
 public:
  explicit LocalClient(Context* ctx);
  ~LocalClient();  // runs what is queued, then stops

  template <typename Resp>
  using Done = std::function<void(Error, Resp)>;

  void txn(etcdserverpb::TxnRequest req, Done<etcdserverpb::TxnResponse> done);
  void range(etcdserverpb::RangeRequest req, Done<etcdserverpb::RangeResponse> done);
  void del(std::string key, Done<etcdserverpb::DeleteRangeResponse> done);
  // A new lease of `ttl` seconds with a fresh id (a session's lease).
  void lease_grant(int64_t ttl, Done<etcdserverpb::LeaseGrantResponse> done);

  // A watch on [key, end) (range.h's convention) from `start_rev`;
  // `on_events` runs on the executor thread for each batch, until cancel().
  // cancel() is idempotent; called on the executor thread, no callback runs
  // after it (one already queued sees the watch canceled and does nothing).
  // An empty batch means the watch lost its place (compaction): re-read.
  class Watch {
   public:
    virtual ~Watch() = default;
    virtual void cancel() = 0;
  };
  std::shared_ptr<Watch> watch(std::string key, std::string end, int64_t start_rev,
                               std::function<void(std::vector<mvccpb::Event>&&)> on_events);

  // Runs `fn` on the executor thread.
  void post(std::function<void()> fn);
  Context* context() const { return ctx_; }

 private:
  Context* ctx_;
  Executor executor_{1, "local-client"};  // one thread: recipe callbacks never run concurrently
};

}  // namespace etcdq::server
