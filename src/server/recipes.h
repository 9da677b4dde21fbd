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

// etcd's Lock and Election services call clientv3 inside the server and
// hand its errors back as plain ones: code Unknown, etcd's message.
inline grpc::Status service_status(const Error& e) {
  if (e.ok()) return grpc::Status::OK;
  if (e.code() == Code::kCancelled) return to_grpc(e);
  return grpc::Status(grpc::StatusCode::UNKNOWN, e.message());
}

}  // namespace etcdq::server
