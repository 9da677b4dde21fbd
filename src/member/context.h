// The narrow API of one member that its servers share (as etcd's EtcdServer
// is for v3rpc): the consensus node, the store, the lessor, alarms, the
// published member table, the key-space plug-ins, who this member is and
// the request limits. gRPC services (server/) and the peer server translate requests
// into proposals (member/pipeline.h) or reads, and results into responses;
// they hold no state of their own.
//
// Thread-safety: the pointers are set before any server starts and not
// changed while they serve; the objects behind them say their own rules.
#pragma once

#include <cstdint>
#include <string>

#include "apply/applier.h"
#include "auth/jwt_tokens.h"
#include "auth/simple_tokens.h"
#include "auth/store.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcdq/command.pb.h"
#include "lease/id.h"
#include "lease/lessor.h"
#include "member/consensus.h"
#include "member/identity.h"
#include "member/membership.h"
#include "mvcc/store.h"
#include "keyspace/registry.h"
#include "consensus/node.h"

namespace etcdq::member {

struct Limits {
  int64_t max_request_bytes = 1572864;  // --max-request-bytes, etcd's default 1.5 MiB
  int64_t max_txn_ops = 128;            // --max-txn-ops
  int64_t quota_bytes = 2LL << 30;      // --quota-backend-bytes (etcd's default 2 GiB; <= 0: none)
  int bcrypt_cost = 10;                 // --bcrypt-cost (auth/bcrypt.h)
};

struct Context {
  consensus::Node* node;
  // What the pipeline, the read path and the headers use of `node`
  // (member/consensus.h); a fake in the unit tests of those paths.
  Consensus* consensus = nullptr;
  // The configuration and its changes (member/membership.h).
  Membership* membership = nullptr;
  mvcc::Store* store;
  lease::Lessor* lessor;
  lease::IdGenerator* lease_ids;
  apply::Alarms* alarms;
  apply::Members* members;  // published names and client URLs (membership itself is the node's)
  // The key-space plug-ins' instances (keyspace/registry.h): watch
  // hooks, peer reports, metrics.
  keyspace::Instances* plugins = nullptr;
  // The key space of the apply chain (Applier::keys): reads on views and
  // watches go through its read side, so they see what the same read
  // inside a write txn sees (a Range of a plug-in's alias prefix reads the
  // keys stored under its own, keyspace/kind.h).
  apply::KeySpace* keys = &apply::plain_keys();
  auth::Store* auth = nullptr;           // replicated users, roles, permissions (auth/store.h)
  auth::SimpleTokens* tokens = nullptr;  // this member's tokens (--auth-token simple)
  const auth::JwtTokens* jwt = nullptr;  // --auth-token jwt: used instead of `tokens`
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

}  // namespace etcdq::member
