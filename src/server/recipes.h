// etcd's concurrency recipes (clientv3/concurrency: Mutex, Election,
// waitDeletes), run in-process on a LocalClient, for the Lock and Election
// services. The key of a session is `<prefix>/<lease id in hex>`; whoever's
// key has the lowest create revision under the prefix holds the lock or
// leads the election.
//
// All callbacks run on the LocalClient's executor thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "server/local_client.h"

namespace etcdq::server {

// A recipe in progress; cancel() stops its waiting (idempotent; executor thread).
class Recipe {
 public:
  virtual ~Recipe() = default;
  virtual void cancel() = 0;
};

// The session key for `prefix` (with a trailing '/') and `lease`.
std::string session_key(const std::string& prefix, int64_t lease);

// Waits until no key under `prefix` has a create revision <= max_create_rev;
// `done` gets the header of the last read.
std::shared_ptr<Recipe> wait_deletes(LocalClient* c, std::string prefix, int64_t max_create_rev,
                                     std::function<void(Error, etcdserverpb::ResponseHeader)> done);

// Puts `key` (with `value`, on `lease`) unless it exists. `done` gets the
// txn response and the key's create revision.
void put_if_absent(LocalClient* c, const std::string& prefix, const std::string& key, const std::string& value,
                   int64_t lease, std::function<void(Error, etcdserverpb::TxnResponse, int64_t create_rev)> done);

std::string prefix_end(const std::string& prefix);

// The key under `prefix` created first (oldest) or last (newest): the
// holder, or the waiter just ahead (clientv3's WithFirstCreate/WithLastCreate).
etcdserverpb::RangeRequest by_create(const std::string& prefix, bool newest);

// The state of one unary call that runs a recipe on the LocalClient's
// executor (Lock, Campaign). finish() answers the call exactly once; an
// error (or a cancel) first runs abandon(), which undoes what the recipe
// placed (etcd's Unlock/Resign on a failed or canceled wait).
struct RecipeCallState {
  virtual ~RecipeCallState() = default;
  virtual void abandon() {}
  void finish(const Error& e);

  LocalClient* c = nullptr;
  grpc::ServerUnaryReactor* call = nullptr;  // null once finished
  bool canceled = false;
  std::shared_ptr<Recipe> wait;  // what it is waiting on, if anything
};

// The reactor of such a call: runs `start` on the executor; a client cancel
// stops the wait and finishes with CANCELLED.
class RecipeReactor final : public grpc::ServerUnaryReactor {
 public:
  RecipeReactor(std::shared_ptr<RecipeCallState> st, std::function<void()> start);
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<RecipeCallState> st_;
};

// etcd's Lock and Election services call clientv3 inside the server and
// hand its errors back as plain ones: code Unknown, etcd's message.
inline grpc::Status service_status(const Error& e) {
  if (e.ok()) return grpc::Status::OK;
  if (e.code() == Code::kCancelled) return to_grpc(e);
  return grpc::Status(grpc::StatusCode::UNKNOWN, e.message());
}

}  // namespace etcdq::server
