// One etcdq member: the core that owns storage → MVCC → lessor → applier →
// consensus → queues and the leader-only work, and hands its servers the
// narrow API they share (context(): member/context.h; every write through
// member/pipeline.h), as etcd's EtcdServer does for v3rpc. main() is flags →
// Member → servers; the servers (server/, http/) only translate.
//
// Life cycle, from one thread (main):
//   open()  — data dir, identity, state database, an interrupted snapshot
//             install finished first, consensus started;
//   (the caller starts the peer listener, which hands libraft's connections
//    to adopt_raft_connection(): a cluster elects its leader through it)
//   join()  — waits for a leader and the log held at start, publishes this
//             member's attributes through the log, starts queues and the
//             leader-only work (member/leader_duties.h), and adds its
//             series to /metrics (member/metrics.h);
//   (the caller serves clients)
//   stop()  — stops leader-only work and the queue threads, then consensus:
//             in-flight proposals finish and are answered, new ones get
//             "etcdserver: server stopped".
// The Member must outlive every server that uses its context.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "member/auto_compaction.h"
#include "member/context.h"

namespace etcdq::member {

struct InitialMember {
  std::string name;
  std::vector<std::string> peer_urls;  // as given ("http://host:port")
  std::string peer_address;           // the first one's host:port (libraft's address)
};

struct Options {
  std::string name = "default";
  std::string data_dir;
  std::vector<InitialMember> initial_cluster;  // --initial-cluster, in order
  bool join = false;                          // --initial-cluster-state existing
  std::string cluster_token = "etcd-cluster";
  std::vector<std::string> advertise_client_urls;
  Limits limits;
  unsigned heartbeat_ms = 100;
  unsigned election_ms = 1000;
  uint64_t snapshot_count = 8192;  // requests applied between snapshots (consensus/node.h)
  bool strict_reconfig_check = true;
  bool pre_vote = true;
  // etcd 3.6: --wal-dir (member/raft_log_dir.h; "": <data-dir>/member/raft),
  // --force-new-cluster and --max-learners (consensus/node.h), and
  // --snapshot-catchup-entries (0: etcd's 5000, or --snapshot-count if smaller).
  std::string wal_dir;
  bool force_new_cluster = false;
  unsigned max_learners = 1;
  uint64_t snapshot_catchup_entries = 0;
  // --auto-compaction-mode/-retention (member/auto_compaction.h); a
  // retention of 0 leaves auto-compaction off, as etcd's default.
  CompactionMode auto_compaction_mode = CompactionMode::kPeriodic;
  int64_t auto_compaction_retention = 0;  // ms (periodic) or revisions
  // --corrupt-check-time (member/corruption_check.h): the leader compares
  // the members' hashes this often; 0: never (etcd's default).
  int64_t corrupt_check_ms = 0;
  int64_t auth_token_ttl_seconds = 300;  // --auth-token-ttl (simple tokens)
  std::shared_ptr<const auth::JwtTokens> jwt;  // --auth-token jwt (null: simple tokens)
  std::string clickhouse_url;  // queue/clickhouse.h; "": not set up
  std::string clickhouse_db = "default";
  std::string version;  // for the log
  // Polled while open() and join() wait (a stop signal before serving).
  std::function<bool()> stop_requested;
  // This member's removal from the cluster committed (on the consensus
  // thread; must not block): the caller shuts down.
  std::function<void()> on_removed;
  // Peer TLS (consensus/transport.h, PeerTransport::Options::tls_dial): libraft's
  // outgoing connections go through it. Empty: plain TCP.
  std::function<void(int tcp, int plain, const std::string& host)> peer_tls_dial;
};

// Registers the key-space plug-ins this binary has (keyspace/registry.h;
// the work queues). Member::open calls it; so does anything that opens a
// data dir without a member (an offline restore). Idempotent; not
// concurrent with a member's start.
void add_key_spaces();

class Member {
 public:
  // Errors: the data dir, the state database or the Raft log cannot be used
  // (the message names it), or this member is not in the initial cluster.
  // *stopped: a stop was requested first (not an error).
  static Error open(Options opts, std::unique_ptr<Member>* out, bool* stopped);
  ~Member();  // stop() if still running, then closes everything
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  Context& context() { return ctx_; }
  // A connection the peer URL's listener routed to libraft (it opened with
  // consensus::PeerTransport::kMagic): taken over, from any thread, until the
  // Member is destroyed (closed once consensus stopped).
  void adopt_raft_connection(int fd);

  // --experimental-initial-corrupt-check (member/corruption_check.h):
  // between open() and the peer listener's start, on a data dir that held
  // a member before (etcd skips a new one), compares this member's hash at
  // its revision with every other member's. Blocks up to the request
  // timeout. Errors: "<id> found data inconsistency with peers", or this
  // member's state could not be hashed.
  Error initial_corruption_check();

  // Returns false if a stop was requested before it finished, or the
  // cluster's leader says this member was removed (removed_at_start();
  // etcd's ErrMemberRemoved); the member then still needs stop().
  bool join();
  bool removed_at_start() const { return removed_at_start_; }

  bool has_leader();
  bool is_learner();
  // Active alarms by etcd's names ("NOSPACE", "CORRUPT"), for /health.
  std::vector<std::string> active_alarms();
  // etcd's health read: a one-key Range, local (serializable) or after a
  // read barrier. `done` gets the read's error, once: at once (on this
  // thread) when serializable, else when the barrier passed or failed, on
  // whichever thread ended it. Blocks nothing: a caller that must not wait
  // longer than request_timeout() times it out itself (http/server.cc).
  // A linearizable one with no leader known fails at once with
  // errors::no_leader() (etcd would wait out its request timeout).
  // Callable from open() on (before join(): the state as opened).
  void health_read(bool serializable, std::function<void(Error)> done);
  // etcd's request timeout (consensus/node.h), for callers that wait on the cluster.
  std::chrono::milliseconds request_timeout();

  // A key-space plug-in's page on the HTTP ports (keyspace::Instance::page,
  // e.g. /queues), for the requester holding `token` (an etcd auth token
  // as the JSON gateway takes it, "" for none). With auth enabled the page
  // shows only what that user may Range on the client port, and a request
  // without a token is refused (errors::user_empty()), one with a bad token
  // with errors::invalid_auth_token(). *found: a plug-in serves `path`.
  // Any thread.
  Error page(std::string_view path, std::string_view token, bool* found, std::string* content_type,
             std::string* body);

  // Idempotent.
  void stop();

 private:
  Member() = default;
  struct Parts;
  Options opts_;
  bool removed_at_start_ = false;  // join() found this member removed
  Context ctx_{};
  std::unique_ptr<Parts> parts_;
};

}  // namespace etcdq::member
