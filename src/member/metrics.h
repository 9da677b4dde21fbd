// The member's series read from its live state at each scrape
// (common/metrics.h Sources), with etcd 3.4's names, types and help
// (etcd's server/etcdserver/metrics.go, server/storage/mvcc/metrics.go):
//
//   etcd_server_has_leader, etcd_server_is_leader, etcd_server_is_learner  gauges, 0 or 1
//   etcd_server_id{server_id}                 1, the member id in hex
//   etcd_server_proposals_committed_total     gauge: the Raft commit index (etcd sets it so too)
//   etcd_server_proposals_applied_total       gauge: the applied index
//   etcd_server_quota_backend_bytes           --quota-backend-bytes (etcd's 2 GiB default; 0 if none)
//   etcd_mvcc_db_total_size_in_bytes          RocksDB's files on disk (storage::Engine::size_bytes)
//   etcd_debugging_mvcc_db_total_size_in_bytes  the same (etcd 3.4 still has both)
//   etcd_mvcc_db_total_size_in_use_in_bytes   RocksDB's live-data estimate (Engine::in_use_bytes)
//   etcd_debugging_mvcc_keys_total            live keys (mvcc::Store::keys)
//   etcd_debugging_mvcc_watcher_total         watchers in the watch hub
//   etcd_debugging_mvcc_watch_stream_total    watch streams holding a watcher (etcd
//                                             also counts streams with none)
//   etcd_debugging_mvcc_slow_watcher_total    watchers not synced (catching up or parked)
//   etcd_debugging_mvcc_current_revision      the published view's revision
//   etcd_debugging_mvcc_compact_revision      the published view's compacted revision
//   etcd_debugging_auth_revision              auth::Store::revision
//   etcd_network_known_peers{Local,Remote}    1 for each member of the configuration,
//                                             this one included (etcd's transport counts
//                                             itself too)
//   and the key-space plug-ins' families (the queues': queue/metrics.h).
//
// Counters kept where their cause happens register themselves in their own
// layers (consensus/metrics.h, mvcc/metrics.h, lease, storage, server/).
#pragma once

#include <memory>

#include "common/metrics.h"
#include "member/context.h"

namespace etcdq::member {

// `ctx` and `engine` must outlive the returned handle.
std::unique_ptr<metrics::SourceHandle> add_member_metrics(const Context* ctx, const storage::Engine* engine);

}  // namespace etcdq::member
