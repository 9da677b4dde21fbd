// What every gRPC service of one member shares: the consensus node, the
// store, who this member is, and the request limits. Services translate
// requests into proposals or reads and results into responses; they hold no
// state of their own.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>

#include "apply/applier.h"
#include "etcdq/command.pb.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "lease/id.h"
#include "lease/lessor.h"
#include "mvcc/store.h"
#include "queue/host.h"
#include "queue/scheduler.h"
#include "raft/node.h"
#include "server/identity.h"

namespace etcdq::server {

struct Limits {
  int64_t max_request_bytes = 1572864;  // --max-request-bytes, etcd's default 1.5 MiB
  int64_t max_txn_ops = 128;            // --max-txn-ops
  int64_t quota_bytes = 2LL << 30;      // --quota-backend-bytes (etcd's default 2 GiB; <= 0: none)
};

struct Context {
  raft::Node* node;
  mvcc::Store* store;
  lease::Lessor* lessor;
  lease::IdGenerator* lease_ids;
  apply::Alarms* alarms;
  apply::Members* members;  // published names and client URLs (membership itself is the node's)
  queue::Host* queue_host = nullptr;  // consumer watches (queue/host.h)
  queue::Book* queues = nullptr;                  // replicated queue state (queue/book.h)
  queue::Scheduler* queue_scheduler = nullptr;   // takes consumer reports (queue/scheduler.h)
  storage::Checkpoints* checkpoints;  // the state behind our snapshots (Peer.FetchSnapshot)
  MemberInfo self;
  // What this member publishes (set before any server starts, then
  // read-only): Peer.Attributes answers it.
  apply::MemberAttributes self_attributes;
  uint64_t cluster_id;  // until the replicated one is known (members->cluster_id())
  std::string cluster_token;  // --initial-cluster-token: added members' ids derive from it
  Limits limits;

  // etcd's header.fill: ids and term always; the current revision when the
  // response did not set one, unless `with_revision` is false (etcd's
  // Cluster service answers without a revision).
  void fill_header(etcdserverpb::ResponseHeader* h, bool with_revision = true) const;
  uint64_t current_cluster_id() const;
};

grpc::Status to_grpc(const Error& e);

// etcd refuses a proposal whose encoding exceeds --max-request-bytes
// (ErrRequestTooLarge, etcdserver/v3_server.go). What it measures is its
// InternalRaftRequest, which adds a request header (about 13 bytes) to the
// request; we count the same so the same requests pass.
Error check_request_size(const Context& ctx, const apply::Command& cmd);

// etcd's quota (etcdserver/quota.go): a request that adds data fails with
// errors::no_space() while the NOSPACE alarm is raised, or when the database
// plus the request would exceed --quota-backend-bytes, in which case this
// member raises NOSPACE through the log. Reads and deletes always pass.
Error check_quota(Context& ctx, const apply::Command& cmd);

// etcd's unary interceptor (api/v3rpc/interceptor.go), run first by every
// call but Status: a learner answers only Status and serializable Range
// (`learner_ok`), everything else fails with
// errors::not_supported_for_learner(); a call whose metadata carries
// "hasleader: true" (clientv3.WithRequireLeader) fails with
// errors::no_leader() while this member knows no leader. True when the
// call was finished here.
bool refuse_call(const Context& ctx, grpc::CallbackServerContext* call, grpc::ServerUnaryReactor* reactor,
                 bool learner_ok = false);

// A stream refused before it started (a learner's Watch or LeaseKeepAlive).
template <typename Req, typename Resp>
class RefusedStream final : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  explicit RefusedStream(const grpc::Status& s) { this->Finish(s); }
  void OnDone() override { delete this; }
};

// Finishes a unary call with `e`, or OK.
inline void finish(grpc::ServerUnaryReactor* r, const Error& e) { r->Finish(to_grpc(e)); }

}  // namespace etcdq::server
