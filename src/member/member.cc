#include "member/member.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "apply/state_machine.h"
#include "lease/expiry.h"
#include "member/answer_gate.h"
#include "member/auth.h"
#include "member/corruption_check.h"
#include "member/fsm.h"
#include "member/join_id.h"
#include "member/leader_duties.h"
#include "member/node_consensus.h"
#include "member/peer_prober.h"
#include "member/pipeline.h"
#include "member/raft_log_dir.h"
#include "member/reads.h"
#include "mvcc/compactor.h"
#include "mvcc/etcd_keys.h"
#include "mvcc/range.h"
#include "member/metrics.h"
#include "queue/key_space.h"
#include "consensus/node.h"
#include "consensus/snapshot_install.h"
#include "storage/engine.h"
#include "storage/failure.h"

namespace etcdq::member {

namespace fs = std::filesystem;

namespace {

// Waits for `left` to reach zero under `mu`/`cv`, for at most `timeout`,
// giving up early once `stopping` is set (a stop must not wait on peers).
template <class Done>
void wait_until(std::mutex& mu, std::condition_variable& cv, Done done, std::chrono::milliseconds timeout,
                const std::atomic<bool>& stopping) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu);
  while (!done() && !stopping && std::chrono::steady_clock::now() < deadline) {
    cv.wait_for(lock, std::chrono::milliseconds(50));
  }
}

// The corruption checks' view of this member (member/corruption_check.h):
// its hash, the other members' over Peer.HashKV, a read barrier, and the
// CORRUPT alarm through the pipeline.
CorruptionChecker::Hooks corruption_hooks(Context* ctx, std::chrono::milliseconds timeout,
                                          std::shared_ptr<std::atomic<bool>> stopping) {
  CorruptionChecker::Hooks h;
  h.self = ctx->self.id;
  h.timeout = timeout;
  h.local_hash = [ctx](KvHash* out) -> Error {
    auto view = ctx->store->view();
    out->revision = view->revision();
    out->compact_revision = view->compact_revision();
    // At the current revision: etcd's HashByRev(0).
    return mvcc::etcd_hash_kv(*view, 0, &out->hash);
  };
  h.peer_hashes = [ctx, timeout, stopping](int64_t revision) {
    struct Asked {
      std::mutex mu;
      std::condition_variable cv;
      size_t left = 0;
      std::vector<PeerHash> out;
    };
    auto asked = std::make_shared<Asked>();
    // Right after start the configuration may still be loading.
    std::vector<consensus::MemberState> members = ctx->node->members();
    for (int i = 0; i < 20 && members.empty() && !*stopping; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      members = ctx->node->members();
    }
    for (const auto& m : members) {
      if (m.id == ctx->self.id || m.address.empty()) continue;
      PeerHash p;
      p.id = m.id;
      p.address = m.address;
      p.error = Error(Code::kDeadlineExceeded, "no answer within the request timeout");
      asked->out.push_back(std::move(p));
    }
    asked->left = asked->out.size();
    const uint64_t cluster = ctx->current_cluster_id();
    for (size_t i = 0; i < asked->out.size(); ++i) {
      const uint64_t id = asked->out[i].id;
      ctx->node->forwarder().hash_kv(
          asked->out[i].address, revision, cluster, timeout,
          [asked, i, id, cluster, revision](Error e, const peer::HashKVResponse& r) {
            if (!e) e = check_peer_answer(id, cluster, revision, r);
            std::lock_guard<std::mutex> lock(asked->mu);
            PeerHash& p = asked->out[i];
            p.ok = !e;
            p.error = e;
            if (p.ok) {
              p.hash = {r.hash(), r.hash_revision(), r.compact_revision()};
              p.current_revision = r.revision();
            }
            --asked->left;
            asked->cv.notify_all();
          });
    }
    wait_until(asked->mu, asked->cv, [&asked] { return asked->left == 0; }, timeout + std::chrono::seconds(1),
               *stopping);
    std::vector<PeerHash> out;
    {
      std::lock_guard<std::mutex> lock(asked->mu);
      out = asked->out;
    }
    for (const auto& p : out) {
      // etcd logs every failed request; the checks say what each means.
      if (!p.ok && !is_future_rev(p.error) && !is_compacted(p.error) && !is_cluster_mismatch(p.error)) {
        spdlog::warn("failed hash kv request (local-member-id={:x}, requested-revision={}, remote-peer-id={:x}, "
                     "remote-peer-endpoint={}, error={})",
                     ctx->self.id, revision, p.id, p.address, p.error.message());
      }
    }
    return out;
  };
  h.linearizable_read = [ctx, timeout, stopping]() -> Error {
    struct Read {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      Error error;
    };
    auto read = std::make_shared<Read>();
    ctx->node->read_barrier([read](Error e) {
      std::lock_guard<std::mutex> lock(read->mu);
      read->done = true;
      read->error = e;
      read->cv.notify_all();
    });
    wait_until(read->mu, read->cv, [&read] { return read->done; }, timeout, *stopping);
    std::lock_guard<std::mutex> lock(read->mu);
    return read->done ? read->error : errors::timeout();
  };
  h.raise_corrupt = [ctx](uint64_t member) {
    // etcd's triggerCorruptAlarm: an Alarm request through the log.
    apply::Command cmd;
    cmd.mutable_alarm()->set_action(etcdserverpb::AlarmRequest::ACTIVATE);
    cmd.mutable_alarm()->set_memberid(member);
    cmd.mutable_alarm()->set_alarm(etcdserverpb::CORRUPT);
    cmd.set_internal(true);
    propose(*ctx, std::move(cmd), [member](apply::Result&& r) {
      if (r.error) spdlog::warn("cannot raise the CORRUPT alarm for member {:x}: {}", member, r.error.message());
    });
  };
  return h;
}

// etcd's leader counts each expired lease whose revoke succeeded
// (EtcdServer.revokeExpiredLeases); shown at 0 from open() on, as etcd's.
prometheus::Counter& lease_expired_counter() {
  static prometheus::Counter& c =
      metrics::counter("etcd_debugging_server_lease_expired_total", "The total number of expired leases.");
  return c;
}

// <data-dir>/member/snap held RocksDB checkpoints, one a Raft snapshot, that
// installers streamed; they stream the live state now (member/fsm.h,
// stream_state). Those left by an older etcdq pin SST files: removed.
void remove_old_checkpoints(const std::string& data_dir) {
  std::error_code ec;
  const fs::path dir = fs::path(data_dir) / "member" / "snap";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().starts_with("snap-")) fs::remove_all(e.path(), ec);
  }
  fs::remove(dir, ec);  // only when empty
}

}  // namespace

// The one place that names a key-space plug-in: the work queues of
// QUEUES.md (queue/key_space.h).
void add_key_spaces() {
  queue::add_key_space();
}

// Everything the member owns, in construction order (destroyed in reverse).
struct Member::Parts {
  std::unique_ptr<apply::StateMachine> state;
  std::unique_ptr<ApplierFsm> fsm;  // the applier as consensus sees it
  std::unique_ptr<lease::IdGenerator> lease_ids;
  std::unique_ptr<auth::SimpleTokens> tokens;
  LeaderDuties duties;
  // Answers the revokes it proposed only while the node runs: destroyed
  // after the node (below it here means before it in destruction).
  std::unique_ptr<lease::Expiry> expiry;
  // Holds answers until the watch streams wrote the entry's events
  // (member/answer_gate.h); outlives the node, whose stop drains it.
  AnswerGate gate;
  std::unique_ptr<consensus::Node> node;
  std::unique_ptr<NodeConsensus> consensus;  // over `node`
  std::unique_ptr<AutoCompactor> auto_compactor;
  std::unique_ptr<PeerProber> prober;  // every member probes the others
  // --corrupt-check-time; its hooks give up waiting on peers once `stopping`.
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<CorruptionChecker> corruption;
  bool stopped = false;
  // Reads the parts above at each scrape: declared last, destroyed first.
  std::unique_ptr<metrics::SourceHandle> metrics;
};

Error Member::open(Options opts, std::unique_ptr<Member>* out, bool* stopped) {
  *stopped = false;
  std::unique_ptr<Member> m(new Member());
  m->opts_ = std::move(opts);
  m->parts_ = std::make_unique<Parts>();
  Options& o = m->opts_;
  Context& ctx = m->ctx_;
  Parts& p = *m->parts_;

  // Members of the initial cluster, with etcd's ids.
  std::vector<uint64_t> ids;
  std::vector<consensus::Peer> peers;
  const InitialMember* self = nullptr;
  auto derive = [&](const std::string& token) {
    ids.clear();
    peers.clear();
    for (const auto& im : o.initial_cluster) {
      MemberInfo info;
      info.name = im.name;
      info.peer_urls = im.peer_urls;
      info.id = member_id(info.peer_urls, token);
      if (im.name == o.name) {
        info.client_urls = o.advertise_client_urls;
        ctx.self = info;
        self = &im;
      }
      ids.push_back(info.id);
      peers.push_back({info.id, im.peer_address});
    }
    ctx.cluster_id = cluster_id(ids);
    ctx.cluster_token = token;
  };
  derive(o.cluster_token);
  if (self == nullptr) {
    return errors::internal("couldn't find local name \"" + o.name + "\" in the initial cluster configuration");
  }
  ctx.limits = o.limits;

  std::error_code ec;
  fs::create_directories(fs::path(o.data_dir) / "member", ec);
  if (ec) return errors::internal("cannot create data dir " + o.data_dir + ": " + ec.message());
  // A state database that cannot write (a full disk) stops the member, as
  // etcd's failed backend commit does (storage/failure.h); a restart
  // re-applies from the Raft log whatever RocksDB had not made durable.
  storage::on_failure([](const std::string& reason) {
    spdlog::critical("{}, stopping", reason);
    spdlog::default_logger()->flush();
    std::_Exit(70);
  });
  std::unique_ptr<storage::Engine> engine;
  const auto open_started = std::chrono::steady_clock::now();
  if (Error e = storage::Engine::open((fs::path(o.data_dir) / "member" / "db").string(), &engine)) return e;
  // etcd's "opened backend db" with its time: after a crash RocksDB replays
  // its own log first, part of how long a restarted member takes to serve.
  spdlog::info("opened the state database in {} ms",
               std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - open_started)
                   .count());
  // A data dir keeps the token it was made (or restored) with, as etcd
  // ignores --initial-cluster-token once one exists: the other members'
  // ids in the first Raft configuration derive from it.
  if (std::string stored; stored_cluster_token(engine.get(), &stored) && stored != o.cluster_token) {
    spdlog::warn("data dir {} was made with --initial-cluster-token {}; using it (the flag says {})", o.data_dir,
                 stored, o.cluster_token);
    derive(stored);
  }
  // A member joining takes the id MemberAdd gave it (member/join_id.h)
  // until its data dir holds one: also after a crash between creating the
  // state database and storing the id (keep_identity below), which left a
  // member that restarted under the flags' id, unknown to the cluster.
  if (o.join && !stored_member_id(engine.get())) {
    std::vector<std::string> others;
    for (const auto& im : o.initial_cluster) {
      if (&im != self) others.push_back(im.peer_address);
    }
    uint64_t learned = 0;
    if (Error e = learn_joining_id(others, self->peer_address, ctx.self.id, 3, o.stop_requested, &learned)) return e;
    for (auto& peer : peers) {
      if (peer.id == ctx.self.id) peer.id = learned;
    }
    ctx.self.id = learned;
  }
  if (o.join) {
    // The cluster id comes with the log (the first published attributes).
    spdlog::info("starting etcdq {} as member {:x} ({}) joining an existing cluster, data dir {}", o.version,
                 ctx.self.id, o.name, o.data_dir);
  } else {
    spdlog::info("starting etcdq {} as member {:x} ({}) of cluster {:x}, data dir {}", o.version, ctx.self.id, o.name,
                 ctx.cluster_id, o.data_dir);
  }

  {
    // A joiner's cluster id is not the hash of its --initial-cluster (that
    // lists today's members, not the first ones): 0 stands for "from the
    // log" (current_cluster_id), so neither the data dir nor a header
    // carries a made-up one.
    if (o.join) ctx.cluster_id = 0;
    uint64_t member = ctx.self.id, cluster = ctx.cluster_id;
    if (keep_identity(engine.get(), &member, &cluster, ctx.cluster_token)) {
      if (o.join && member != ctx.self.id) {
        // Expected: the id MemberAdd gave it, not one derived from flags.
        spdlog::info("data dir {} belongs to member {:x}, the id it joined with", o.data_dir, member);
      } else if (cluster == 0 || o.join) {
        spdlog::warn("data dir {} belongs to member {:x}; keeping that id (the flags give {:x})", o.data_dir,
                     member, ctx.self.id);
      } else {
        spdlog::warn("data dir {} belongs to member {:x} of cluster {:x}; keeping those ids (the flags give {:x})",
                     o.data_dir, member, cluster, ctx.self.id);
      }
      for (auto& peer : peers) {
        if (peer.id == ctx.self.id) peer.id = member;
      }
      ctx.self.id = member;
      ctx.cluster_id = cluster;
    }
  }
  add_key_spaces();  // before the state opens their instances
  apply::StateMachineOptions so;
  so.min_lease_ttl_seconds = lease::min_ttl_seconds(o.election_ms);
  so.member_id = ctx.self.id;
  p.state = std::make_unique<apply::StateMachine>(std::move(engine), so);
  apply::StateMachine& state = *p.state;
  remove_old_checkpoints(o.data_dir);
  p.fsm = std::make_unique<ApplierFsm>(state.applier());

  consensus::NodeOptions ro;
  if (Error e = choose_raft_log_dir(o.data_dir, o.wal_dir, &ro.dir)) return e;
  ro.id = ctx.self.id;
  ro.address = self->peer_address;
  ro.initial_cluster = peers;
  ro.join = o.join;
  ro.heartbeat_ms = o.heartbeat_ms;
  ro.election_ms = o.election_ms;
  ro.snapshot_threshold = static_cast<unsigned>(std::min<uint64_t>(o.snapshot_count, 1u << 30));
  // etcd's 5000 by default, but no more than --snapshot-count: a small
  // --snapshot-count is how a member bounds the log libraft holds in memory.
  ro.snapshot_trailing = o.snapshot_catchup_entries > 0
                             ? static_cast<unsigned>(std::min<uint64_t>(o.snapshot_catchup_entries, 1u << 30))
                             : std::min(ro.snapshot_trailing, ro.snapshot_threshold);
  ro.max_learners = o.max_learners;
  ro.force_new_cluster = o.force_new_cluster;
  ro.strict_reconfig_check = o.strict_reconfig_check;
  ro.pre_vote = o.pre_vote;
  ro.on_removed = o.on_removed;
  if (o.peer_tls_dial) {
    ro.io = [dial = o.peer_tls_dial](uv_loop_t* loop, std::shared_ptr<consensus::Forwarder> f) {
      return consensus::peer_uv_io(loop, std::move(f), dial);
    };
  }
  ro.install_plan_path = (fs::path(o.data_dir) / "member" / "install-plan").string();
  LeaderDuties* duties = &p.duties;
  ro.on_role_change = [duties](bool leading) { duties->role_changed(leading); };

  // A snapshot install that did not finish: fetch the state before libraft
  // starts, from any member that has it (consensus/snapshot_install.h).
  consensus::InstallPlan plan;
  if (consensus::read_plan(ro.install_plan_path, &plan)) {
    spdlog::warn("a snapshot install did not finish: fetching the state at index {} or later before starting",
                 plan.min_index);
    std::vector<std::string> initial;
    for (const auto& peer : peers) initial.push_back(peer.address);
    bool stopped_first = false;
    consensus::fetch_planned_state(p.fsm.get(), plan, initial, ro.address, o.stop_requested, &stopped_first);
    if (stopped_first) {
      spdlog::info("stopped before the state was fetched");
      *stopped = true;
      *out = std::move(m);
      return {};
    }
    consensus::remove_plan(ro.install_plan_path);
  }

  p.node = std::make_unique<consensus::Node>(ro, p.fsm.get());
  if (Error e = p.node->start()) return e;
  AnswerGate* gate = &p.gate;
  p.node->set_answer_route([gate](std::function<void()>& answers) { return gate->hold(answers); },
                           [gate] { gate->drain(); });
  ctx.node = p.node.get();
  p.consensus = std::make_unique<NodeConsensus>(p.node.get());
  ctx.consensus = p.consensus.get();
  ctx.membership = p.consensus.get();
  ctx.store = state.store();
  ctx.lessor = state.lessor();
  p.lease_ids = std::make_unique<lease::IdGenerator>(ctx.self.id);
  ctx.lease_ids = p.lease_ids.get();
  ctx.alarms = state.alarms();
  ctx.members = state.members();
  ctx.auth = state.auth();
  p.tokens = std::make_unique<auth::SimpleTokens>(std::chrono::seconds(std::max<int64_t>(1, o.auth_token_ttl_seconds)));
  ctx.tokens = p.tokens.get();
  ctx.jwt = o.jwt.get();
  ctx.keys = &state.applier()->keys();
  ctx.plugins = state.plugins();
  // The member's gauges from here on, before a leader is known: a member
  // restarted without quorum shows etcd_server_has_leader 0 (etcd 3.6
  // registers them at start, and the mixin's etcdNoLeader alert reads it).
  // Everything they read is set above and thread-safe to read while the
  // member waits (the health endpoints read the same from here on).
  p.metrics = add_member_metrics(&m->ctx_, state.engine());
  lease_expired_counter();

  ctx.self_attributes.set_id(ctx.self.id);
  ctx.self_attributes.set_name(o.name);
  for (const auto& u : o.advertise_client_urls) ctx.self_attributes.add_client_urls(u);
  if (!o.join) ctx.self_attributes.set_cluster_id(ctx.cluster_id);
  *out = std::move(m);
  return {};
}

void Member::adopt_raft_connection(int fd) { parts_->node->adopt_peer_connection(fd); }

// libraft already runs here (open() started it), but before the peer
// listener starts nothing reaches it and it applies nothing new: the state
// hashed is what the data dir held, as etcd hashes before raft starts. Its
// outgoing election attempts are pre-votes (the default), which disturb no
// leader; with --pre-vote=false a long check could make it bump its term.
Error Member::initial_corruption_check() {
  CorruptionChecker checker(corruption_hooks(&ctx_, request_timeout(), parts_->stopping));
  return checker.initial_check();
}

bool Member::join() {
  Context& ctx = ctx_;
  Parts& p = *parts_;
  auto stop_requested = [this] { return opts_.stop_requested && opts_.stop_requested(); };

  // Serve clients only once the log held at start is applied: before that
  // a read could miss acknowledged writes.
  // Removed while it was down: the others drop its messages, so it would
  // wait forever, or follow a leader that no longer counts it (member/
  // join_id.h removed_by_cluster). Asks the leader it knows first.
  auto removed = [&ctx, &p] {
    std::vector<std::pair<uint64_t, std::string>> others;
    const uint64_t leader = p.node->progress().leader_id;
    for (const auto& ms : ctx.membership->members()) {
      if (ms.id == ctx.self.id) continue;
      others.emplace(ms.id == leader ? others.begin() : others.end(), ms.id, ms.address);
    }
    if (others.empty() || !removed_by_cluster(p.node->forwarder(), others, ctx.self.id)) return false;
    spdlog::error("the member has been permanently removed from the cluster; "
                  "the data dir used by this member must be removed");
    return true;
  };
  int waited = 0;
  while (!p.node->wait_ready(500)) {
    if (stop_requested()) {
      spdlog::info("stopped before becoming ready");
      return false;
    }
    if (++waited % 10 == 0) spdlog::warn("waiting for a leader and for the log to be applied");
    if (waited % 4 == 1 && removed()) {
      removed_at_start_ = true;
      return false;
    }
  }
  if (removed()) {
    removed_at_start_ = true;
    return false;
  }

  // Publish our name and client URLs through the log (etcd's publish) before
  // serving, as etcd does: once a member answers clients, every member lists
  // it and can forward to it. A follower forwards this to the leader, which
  // confirms it with us (Peer.Attributes) and publishes its own first.
  {
    const apply::MemberAttributes& a = ctx.self_attributes;
    // A restart with the same name and URLs has nothing new to say.
    auto stored = p.state->members()->get(ctx.self.id);
    bool same = stored && stored->name() == a.name() && stored->client_urls_size() == a.client_urls_size() &&
                std::equal(a.client_urls().begin(), a.client_urls().end(), stored->client_urls().begin());
    for (int attempt = 1; !same; ++attempt) {
      apply::Command cmd;
      *cmd.mutable_member_attributes() = a;
      cmd.set_internal(true);
      auto done = std::make_shared<std::promise<Error>>();
      auto fut = done->get_future();
      propose(ctx, std::move(cmd), [done](apply::Result&& r) { done->set_value(r.error); });
      Error e = fut.get();
      if (!e) break;
      if (attempt % 40 == 0) spdlog::warn("cannot publish this member's attributes yet: {}", e.message());
      if (stop_requested()) {
        spdlog::info("stopped before serving");
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    spdlog::info("{} member {:x} ({}) of cluster {:x} with client URLs {}", same ? "already published" : "published",
                 ctx.self.id, opts_.name, ctx.current_cluster_id(),
                 opts_.advertise_client_urls.empty() ? "" : opts_.advertise_client_urls.front());
  }

  // The key-space plug-ins' services (keyspace/kind.h, MemberServices):
  // the queues' scheduler and ClickHouse sink.
  keyspace::MemberServices services;
  services.self = ctx.self.id;
  consensus::Node* n = p.node.get();
  Context* c = &ctx_;
  services.propose = [c](apply::Command cmd, std::function<void(Error)> done) {
    cmd.set_internal(true);  // a plug-in's own decisions (the leader's)
    propose(*c, std::move(cmd), [done = std::move(done)](apply::Result&& r) { done(r.error); });
  };
  services.leader_target = [n] { return n->leader_target(); };
  services.report = [n](const std::string& target, const google::protobuf::Message& report) {
    n->forwarder().report(target, report);
  };
  services.flags = {{"clickhouse-url", opts_.clickhouse_url}, {"clickhouse-db", opts_.clickhouse_db}};
  p.state->plugins()->serve(services);
  p.expiry = std::make_unique<lease::Expiry>(p.state->lessor(), [c](int64_t id, std::function<void()> done) {
    apply::Command cmd;
    cmd.mutable_lease_revoke()->set_id(id);
    cmd.set_internal(true);  // an expiry (etcd revokes it as root)
    propose(*c, std::move(cmd), [done = std::move(done)](apply::Result&& r) {
      if (!r.error) lease_expired_counter().Increment();
      done();
    });
  });
  lease::Expiry* expiry = p.expiry.get();
  p.duties.add({"lease expiry", [expiry] { expiry->start_leading(); }, [expiry] { expiry->stop_leading(); }});
  for (const auto& i : p.state->plugins()->all()) {
    keyspace::Instance* plugin = i.get();
    p.duties.add({std::string(plugin->kind().name()), [plugin] { plugin->set_leading(true); },
                  [plugin] { plugin->set_leading(false); }});
  }
  if (opts_.auto_compaction_retention > 0) {
    AutoCompactor::Hooks hooks;
    hooks.current_revision = [c] { return c->store->view()->revision(); };
    hooks.compact = [c](int64_t revision, std::function<void(Error)> done) {
      apply::Command cmd;
      cmd.mutable_compaction()->set_revision(revision);
      cmd.set_internal(true);
      propose(*c, std::move(cmd), [done = std::move(done)](apply::Result&& r) { done(r.error); });
    };
    p.auto_compactor =
        std::make_unique<AutoCompactor>(opts_.auto_compaction_mode, opts_.auto_compaction_retention, hooks);
    AutoCompactor* compactor = p.auto_compactor.get();
    p.duties.add({"auto-compaction", [compactor] { compactor->set_leading(true); },
                  [compactor] { compactor->set_leading(false); }});
    compactor->start();
  }
  if (opts_.corrupt_check_ms > 0) {
    p.corruption = std::make_unique<CorruptionChecker>(corruption_hooks(&ctx_, request_timeout(), p.stopping));
    CorruptionChecker* checker = p.corruption.get();
    p.duties.add({"corruption check", [checker] { checker->set_leading(true); },
                  [checker] { checker->set_leading(false); }});
    checker->start(std::chrono::milliseconds(opts_.corrupt_check_ms));
  }
  p.duties.start();
  p.prober = std::make_unique<PeerProber>(p.node.get());
  p.prober->start();
  return true;
}

bool Member::has_leader() { return parts_->node->progress().leader_id != 0; }

bool Member::is_learner() { return parts_->node->progress().is_learner; }

std::vector<std::string> Member::active_alarms() {
  std::vector<std::string> out;
  for (const auto& a : ctx_.alarms->list(0, etcdserverpb::NONE)) {
    out.push_back(etcdserverpb::AlarmType_Name(a.alarm()));
  }
  return out;
}

Error Member::page(std::string_view path, std::string_view token, bool* found, std::string* content_type,
                   std::string* body) {
  *found = false;
  if (ctx_.plugins == nullptr) return {};
  // What a caller may see here is what it may Range on the client port: the
  // same permission check (member/auth.h, check_read), with the token a
  // gateway request carries. etcd's own HTTP-only ports (/metrics) show no
  // keys, so nothing here is shown without that check passing.
  auth::Caller caller;
  bool checked = auth_enabled(ctx_);
  Error refused;
  if (checked) refused = token.empty() ? errors::user_empty() : caller_of_token(ctx_, token, &caller);
  keyspace::MayRead may_read = [this, checked, &refused, &caller](std::string_view key, std::string_view end) {
    if (!checked) return true;
    return !refused && !check_read(ctx_, caller, key, end);
  };
  int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  keyspace::Page p;
  if (!ctx_.plugins->page(path, now_ms, may_read, &p)) return {};
  *found = true;
  if (refused && p.needs_user) return refused;
  *content_type = std::move(p.content_type);
  *body = std::move(p.body);
  return {};
}

void Member::health_read(bool serializable, std::function<void(Error)> done) {
  // etcd's health check: a keys-only Range of one key (etcdhttp/health.go),
  // through the read path a client's takes (member/reads.h).
  if (!serializable && is_learner()) return done(errors::not_supported_for_learner());
  // Without a leader a linearizable read can only wait out the request
  // timeout (etcd's /readyz takes 7 s to say "request timed out"): a member
  // without quorum says so at once.
  if (!serializable && !has_leader()) return done(errors::no_leader());
  read(ctx_, serializable ? ReadMode::kSerializable : ReadMode::kLinearizable, {},
       [](apply::ViewState& s) -> Error {
         mvcc::RangeOptions o;
         o.limit = 1;
         mvcc::RangeResult r;
         return s.range("", "", o, &r);
       },
       std::move(done));
}

std::chrono::milliseconds Member::request_timeout() {
  return std::chrono::milliseconds(parts_->node->options().request_timeout_ms());
}

void Member::stop() {
  Parts& p = *parts_;
  if (p.stopped) return;
  p.stopped = true;
  *p.stopping = true;
  p.duties.stop();
  if (p.corruption) p.corruption->stop();
  if (p.prober) p.prober->stop();
  if (p.auto_compactor) p.auto_compactor->stop();
  if (p.expiry) p.expiry->stop();
  if (p.state) p.state->plugins()->stop();
  if (p.node) {
    p.node->stop();
    spdlog::info("commands proposed: {} in {} log entries", p.node->commands_proposed(), p.node->entries_proposed());
  }
  // After the node: nothing applies a compaction any more. A running one
  // stops between batches and a Compact(physical=true) still waiting on it
  // is answered "server stopped", before the client server waits for its
  // calls to end.
  if (p.state) p.state->store()->compactor().stop();
}

Member::~Member() {
  if (!parts_) return;
  stop();
  Parts& p = *parts_;
  p.metrics.reset();  // no scrape reads the parts reset below
  p.node.reset();
  p.expiry.reset();  // after the node answered every revoke it proposed
  p.fsm.reset();
  p.state.reset();
}

}  // namespace etcdq::member
