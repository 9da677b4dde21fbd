// etcdq: one member. Opens the state database, starts Raft, waits until the
// log is applied, then serves clients until SIGTERM or SIGINT, when it stops
// taking proposals, lets in-flight ones finish, and closes everything.
#include <absl/synchronization/mutex.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <future>
#include <thread>

#include "apply/applier.h"
#include "http/server.h"
#include "queue/book.h"
#include "queue/clickhouse.h"
#include "queue/metrics.h"
#include "queue/host.h"
#include "queue/keys.h"
#include "queue/scheduler.h"
#include "cli/flags.h"
#include "mvcc/store.h"
#include "raft/node.h"
#include "raft/snapshot_install.h"
#include "server/identity.h"
#include "server/maintenance_service.h"
#include "server/server.h"
#include "storage/checkpoints.h"
#include "storage/engine.h"

using namespace etcdq;

namespace {

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("etcdq");
  // JSON lines, as etcd logs.
  logger->set_pattern(R"({"level":"%l","ts":"%Y-%m-%dT%H:%M:%S.%f%z","msg":"%v"})");
  spdlog::set_default_logger(logger);
  if (level == "debug") spdlog::set_level(spdlog::level::debug);
  else if (level == "warn") spdlog::set_level(spdlog::level::warn);
  else if (level == "error") spdlog::set_level(spdlog::level::err);
  else if (level == "panic" || level == "fatal") spdlog::set_level(spdlog::level::critical);
  else spdlog::set_level(spdlog::level::info);
  spdlog::flush_on(spdlog::level::info);
}

int fail(const std::string& msg) {
  spdlog::critical("{}", msg);
  std::fprintf(stderr, "etcdq: %s\n", msg.c_str());
  return 1;
}

// SIGTERM/SIGINT received since the mask was set, without waiting.
bool stop_signal_pending(const sigset_t& sigs) {
  timespec zero{0, 0};
  return sigtimedwait(&sigs, nullptr, &zero) > 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Every thread inherits this mask; only main takes the stop signals.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Debian's abseil checks every gRPC mutex for lock-order cycles, which
  // showed up as ~4% of a put-heavy profile; it is a debugging aid.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  cli::Config cfg;
  bool exit_now = false;
  if (Error e = cli::parse_flags(argc, argv, &cfg, &exit_now)) {
    std::fprintf(stderr, "etcdq: %s\n", e.message().c_str());
    return 2;
  }
  if (cfg.print_version) {
    std::printf("etcdq Version: %s\nAPI Version: 3.5\n", ETCDQ_VERSION);
    return 0;
  }
  if (exit_now) return 0;
  setup_logging(cfg.log_level);

  // Members of the initial cluster, with etcd's ids.
  std::vector<std::pair<std::string, cli::Url>> initial;
  if (Error e = cli::parse_initial_cluster(cfg.initial_cluster, &initial)) return fail(e.message());
  std::map<std::string, std::vector<cli::Url>> by_name;
  std::vector<std::string> order;
  for (auto& [name, url] : initial) {
    if (!by_name.count(name)) order.push_back(name);
    by_name[name].push_back(url);
  }
  if (!by_name.count(cfg.name)) {
    return fail("couldn't find local name \"" + cfg.name + "\" in the initial cluster configuration");
  }
  server::Context ctx{};
  std::vector<uint64_t> ids;
  std::vector<raft::Peer> peers;
  for (const auto& name : order) {
    server::MemberInfo m;
    m.name = name;
    for (const auto& u : by_name[name]) m.peer_urls.push_back(u.text);
    m.id = server::member_id(m.peer_urls, cfg.initial_cluster_token);
    if (name == cfg.name) {
      for (const auto& u : cfg.advertise_client_urls) m.client_urls.push_back(u.text);
      ctx.self = m;
    }
    ids.push_back(m.id);
    peers.push_back({m.id, by_name[name].front().host_port()});
  }
  ctx.cluster_id = server::cluster_id(ids);
  ctx.limits.max_request_bytes = cfg.max_request_bytes;
  ctx.limits.max_txn_ops = cfg.max_txn_ops;
  ctx.limits.quota_bytes = cfg.quota_backend_bytes == 0 ? (2LL << 30) : cfg.quota_backend_bytes;

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(cfg.data_dir) / "member", ec);
  if (ec) return fail("cannot create data dir " + cfg.data_dir + ": " + ec.message());
  if (cfg.initial_cluster_state == "existing") {
    // The cluster id comes with the log (the first published attributes).
    spdlog::info("starting etcdq {} as member {:x} ({}) joining an existing cluster, data dir {}", ETCDQ_VERSION,
                 ctx.self.id, cfg.name, cfg.data_dir);
  } else {
    spdlog::info("starting etcdq {} as member {:x} ({}) of cluster {:x}, data dir {}", ETCDQ_VERSION, ctx.self.id,
                 cfg.name, ctx.cluster_id, cfg.data_dir);
  }

  std::unique_ptr<storage::Engine> engine;
  if (Error e = storage::Engine::open((fs::path(cfg.data_dir) / "member" / "db").string(), &engine)) {
    return fail(e.message());
  }
  {
    uint64_t member = ctx.self.id, cluster = ctx.cluster_id;
    if (server::keep_identity(engine.get(), &member, &cluster)) {
      spdlog::warn("data dir {} belongs to member {:x} of cluster {:x}; keeping those ids (the flags give {:x})",
                   cfg.data_dir, member, cluster, ctx.self.id);
      for (auto& p : peers) {
        if (p.id == ctx.self.id) p.id = member;
      }
      ctx.self.id = member;
      ctx.cluster_id = cluster;
    }
  }
  auto store = std::make_unique<mvcc::Store>(engine.get());
  lease::Lessor lessor(engine.get(), lease::min_ttl_seconds(cfg.election_ms));
  apply::Alarms alarms(engine.get());
  apply::Members members(engine.get());
  queue::Book queues(engine.get());
  queues.set_self(ctx.self.id);
  apply::Applier applier(store.get(), &lessor, &alarms, &members, &queues);
  storage::Checkpoints checkpoints((fs::path(cfg.data_dir) / "member" / "snap").string());

  raft::NodeOptions ro;
  ro.dir = (fs::path(cfg.data_dir) / "member" / "raft").string();
  ro.id = ctx.self.id;
  ro.address = by_name[cfg.name].front().host_port();
  ro.bind_address = cfg.listen_peer_urls.front().host_port();
  ro.initial_cluster = peers;
  ro.join = cfg.initial_cluster_state == "existing";
  ro.heartbeat_ms = cfg.heartbeat_ms;
  ro.election_ms = cfg.election_ms;
  ro.snapshot_threshold = static_cast<unsigned>(std::min<uint64_t>(cfg.snapshot_count, 1u << 30));
  ro.snapshot_trailing = std::min(2048u, ro.snapshot_threshold);
  ro.strict_reconfig_check = cfg.strict_reconfig_check;
  ro.pre_vote = cfg.pre_vote;
  ro.checkpoints = &checkpoints;
  static std::atomic<bool> removed{false};
  ro.on_removed = [] {
    removed = true;
    kill(getpid(), SIGTERM);  // main's sigwait shuts down in order
  };
  for (const auto& u : cfg.advertise_client_urls) ro.self_client_urls.push_back(u.text);
  ro.client_target_of = [&members](uint64_t id) -> std::string {
    auto a = members.get(id);
    if (!a) return "";
    for (const auto& u : a->client_urls()) {
      std::string t = raft::url_to_target(u);
      if (!t.empty()) return t;
    }
    return "";
  };
  std::string self_target = raft::url_to_target(cfg.advertise_client_urls.front().text);
  ro.all_client_targets = [&members, self_target]() {
    std::vector<std::string> out;
    for (const auto& [id, a] : members.all()) {
      for (const auto& u : a.client_urls()) {
        std::string t = raft::url_to_target(u);
        if (!t.empty() && t != self_target) {
          out.push_back(t);
          break;
        }
      }
    }
    return out;
  };
  ro.install_plan_path = (fs::path(cfg.data_dir) / "member" / "install-plan").string();

  // A snapshot install that did not finish: fetch the state before libraft
  // starts, from any member that has it (raft/snapshot_install.h).
  raft::InstallPlan plan;
  if (raft::read_plan(ro.install_plan_path, &plan)) {
    spdlog::warn("a snapshot install did not finish: fetching the state at index {} or later before starting",
                 plan.min_index);
    raft::Forwarder forwarder;
    for (int attempt = 1;; ++attempt) {
      bool damaged = false;
      Error e = raft::fetch_state(&applier, forwarder, plan, &damaged);
      if (!e) break;
      if (attempt % 10 == 1) spdlog::warn("no member could send the state yet: {}", e.message());
      if (stop_signal_pending(sigs)) {
        spdlog::info("stopped before the state was fetched");
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    raft::remove_plan(ro.install_plan_path);
  }

  // Apply hands deliveries to the consumers hosted here and wakes the queue
  // scheduler (set before apply starts).
  queue::Host queue_host;
  std::atomic<queue::Scheduler*> scheduler_ptr{nullptr};
  queues.set_deliver([&queue_host](std::vector<queue::Delivery>&& d) { queue_host.deliver(std::move(d)); });
  queues.set_revoke([&queue_host](std::vector<uint64_t>&& gone) { queue_host.revoke(gone); });
  queues.set_changed([&scheduler_ptr](std::vector<std::string>&& changed) {
    if (auto* s = scheduler_ptr.load()) s->changed(std::move(changed));
  });

  auto node = std::make_unique<raft::Node>(ro, &applier);
  if (Error e = node->start()) return fail(e.message());
  ctx.node = node.get();
  ctx.store = store.get();
  ctx.lessor = &lessor;
  lease::IdGenerator lease_ids(ctx.self.id);
  ctx.lease_ids = &lease_ids;
  ctx.alarms = &alarms;
  ctx.members = &members;
  ctx.checkpoints = &checkpoints;
  ctx.cluster_token = cfg.initial_cluster_token;

  // Serve clients only once the log held at start is applied: before that
  // a read could miss acknowledged writes.
  int waited = 0;
  while (!node->wait_ready(500)) {
    if (stop_signal_pending(sigs)) {
      spdlog::info("stopped before becoming ready");
      node->stop();
      return 0;
    }
    if (++waited % 10 == 0) spdlog::warn("waiting for a leader and for the log to be applied");
  }

  // Publish our name and client URLs through the log (etcd's publish) before
  // serving, as etcd does: once a member answers clients, every member lists
  // it and can forward to it. A follower forwards this to the leader, which
  // publishes its own first.
  {
    apply::MemberAttributes a;
    a.set_id(ctx.self.id);
    a.set_name(cfg.name);
    for (const auto& u : cfg.advertise_client_urls) a.add_client_urls(u.text);
    if (!ro.join) a.set_cluster_id(ctx.cluster_id);
    // A restart with the same name and URLs has nothing new to say.
    auto stored = members.get(ctx.self.id);
    bool same = stored && stored->name() == a.name() && stored->client_urls_size() == a.client_urls_size() &&
                std::equal(a.client_urls().begin(), a.client_urls().end(), stored->client_urls().begin());
    for (int attempt = 1; !same; ++attempt) {
      apply::Command cmd;
      *cmd.mutable_member_attributes() = a;
      auto done = std::make_shared<std::promise<Error>>();
      auto fut = done->get_future();
      node->propose(std::move(cmd), [done](apply::Result&& r) { done->set_value(r.error); });
      Error e = fut.get();
      if (!e) break;
      if (attempt % 40 == 0) spdlog::warn("cannot publish this member's attributes yet: {}", e.message());
      if (stop_signal_pending(sigs)) {
        spdlog::info("stopped before serving");
        node->stop();
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    spdlog::info("{} member {:x} ({}) of cluster {:x} with client URLs {}", same ? "already published" : "published",
                 ctx.self.id, cfg.name, ctx.current_cluster_id(), cfg.advertise_client_urls.front().text);
  }

  // Queues: consumers hosted here, and the scheduler that (on the leader)
  // hands messages to them (queue/scheduler.h).
  queue::SchedulerOptions so;
  so.self = ctx.self.id;
  raft::Node* n = node.get();
  so.is_leader = [n] { return n->progress().is_leader; };
  so.propose = [n](apply::Command cmd, std::function<void(Error)> done) {
    n->propose(std::move(cmd), [done = std::move(done)](apply::Result&& r) { done(r.error); });
  };
  so.leader_target = [n] { return n->leader_target(); };
  so.report = [n](const std::string& target, const peer::QueueConsumersRequest& req) {
    n->forwarder().queue_consumers(target, req);
  };
  so.skip = [](std::string_view q) {
    std::string_view table;
    return queue::clickhouse_table(q, &table);
  };
  auto scheduler = std::make_unique<queue::Scheduler>(&queues, &queue_host, so);
  scheduler_ptr = scheduler.get();
  ctx.queues = &queues;
  ctx.queue_host = &queue_host;
  ctx.queue_scheduler = scheduler.get();
  scheduler->start();
  queue::ClickHouseOptions cho;
  cho.url = cfg.clickhouse_url;
  cho.database = cfg.clickhouse_db;
  cho.is_leader = so.is_leader;
  cho.propose = so.propose;
  queue::ClickHouseSink clickhouse(&queues, store.get(), cho);
  clickhouse.start();

  http::HttpOptions ho;
  ho.metrics = [&queues, n] {
    auto p = n->progress();
    std::string out = "# HELP etcd_server_has_leader Whether a leader exists. 1 is existence, 0 is not.\n"
                      "# TYPE etcd_server_has_leader gauge\n"
                      "etcd_server_has_leader " + std::to_string(p.leader_id != 0 ? 1 : 0) + "\n"
                      "# HELP etcd_server_is_leader Whether or not this member is a leader. 1 if is, 0 otherwise.\n"
                      "# TYPE etcd_server_is_leader gauge\n"
                      "etcd_server_is_leader " + std::to_string(p.is_leader ? 1 : 0) + "\n";
    int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    return out + queue::metrics_text(queues, now_ms);
  };
  ho.has_leader = [n] { return n->progress().leader_id != 0; };
  ho.server_version = ETCDQ_VERSION;
  ho.cluster_version = "3.5.0";
  http::HttpServer http_server(ho);
  {
    std::vector<std::pair<std::string, int>> listen_http;
    for (const auto& u : cfg.listen_client_http_urls) listen_http.emplace_back(u.host, u.port);
    for (const auto& u : cfg.listen_metrics_urls) listen_http.emplace_back(u.host, u.port);
    if (Error e = http_server.start(listen_http)) {
      scheduler->stop();
      clickhouse.stop();
      node->stop();
      return fail(e.message());
    }
    for (const auto& [host, port] : listen_http) spdlog::info("serving /metrics, /health and /version on http://{}:{}", host, port);
  }

  auto client_server =
      std::make_unique<server::ClientServer>(&ctx, std::chrono::milliseconds(cfg.watch_progress_notify_ms));
  std::vector<std::string> listen;
  for (const auto& u : cfg.listen_client_urls) listen.push_back(u.host_port());
  if (Error e = client_server->start(listen)) {
    node->stop();
    return fail(e.message());
  }
  spdlog::info("ready to serve client requests on {}", cfg.listen_client_urls.front().text);

  int sig = 0;
  sigwait(&sigs, &sig);

  if (removed) {
    spdlog::info("removed from the cluster, shutting down");
  } else {
    spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  // In-flight proposals finish and are answered; new ones get "server
  // stopped"; every watch stream ends with Unavailable (clients resume).
  http_server.stop();
  clickhouse.stop();
  scheduler->stop();
  scheduler_ptr = nullptr;
  node->stop();
  client_server->shutdown(1000);
  // The services (watch progress, lease expiry, lock/election waits) use the
  // node and the store: they go first.
  client_server.reset();
  spdlog::info("commands proposed: {} in {} log entries", node->commands_proposed(), node->entries_proposed());
  node.reset();
  store.reset();
  engine.reset();
  spdlog::info("stopped");
  return 0;
}
