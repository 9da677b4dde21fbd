#include "server/server.h"

#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_posix.h>

#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "server/cluster_service.h"
#include "server/election_service.h"
#include "server/grpc_metrics.h"
#include "server/kv_service.h"
#include "server/leader_monitor.h"
#include "server/local_client.h"
#include "server/lock_service.h"
#include "server/lease_service.h"
#include "server/maintenance_service.h"
#include "server/auth_service.h"
#include "server/call_rules.h"
#include "server/unknown_method.h"
#include "server/watch_service.h"

namespace etcdq::server {

constexpr int kGrpcOverheadBytes = 512 * 1024;
// A client stream's HTTP/2 window, bytes (ClientServer::start says why fixed).
constexpr int kStreamWindowBytes = 1 << 20;
// The services a client URL serves (everything else: unknown_method.h).
const char* const kClientServices[] = {"etcdserverpb.KV",      "etcdserverpb.Watch",   "etcdserverpb.Lease",
                                       "etcdserverpb.Cluster", "etcdserverpb.Maintenance", "v3lockpb.Lock",
                                       "v3electionpb.Election", "etcdserverpb.Auth"};
constexpr int kWatchEndMs = 5000;

struct ClientServer::Services {
  Services(Context* c, std::chrono::milliseconds progress, std::chrono::milliseconds election)
      : local(c), kv(c), watch(c, progress), lease(c), lock(&local), election(&local), maintenance(c),
        cluster(c), auth(c),
        unknown({std::begin(kClientServices), std::end(kClientServices)}),
        leader_monitor(
            election, [c] { return role_of(*c).has_leader; }, [this] { watch.end_streams_requiring_leader(); }) {}
  LocalClient local;  // for the Lock and Election recipes
  KvService kv;
  WatchService watch;
  LeaseService lease;
  LockService lock;
  ElectionService election;
  MaintenanceService maintenance;
  ClusterService cluster;
  AuthService auth;
  UnknownMethodService unknown;  // everything else, member-only calls included
  // Last: stopped first, so it never ends a stream of a service being
  // destroyed. Watch streams only: a LeaseKeepAlive stream ends with "no
  // leader" at its next request (lease_service.cc), Observe and Snapshot
  // are not ended (etcd ends every stream that asked for a leader).
  LeaderMonitor leader_monitor;

  // Every method of the client services that does not pass call_rules.h
  // (ruled_service.h): none, unless a service forgot to install one.
  std::vector<std::string> unruled_methods() {
    std::vector<std::string> out;
    auto add = [&out](std::vector<std::string> m) { out.insert(out.end(), m.begin(), m.end()); };
    add(kv.unruled_methods());
    add(watch.unruled_methods());
    add(lease.unruled_methods());
    add(lock.unruled_methods());
    add(election.unruled_methods());
    add(maintenance.unruled_methods());
    add(cluster.unruled_methods());
    add(auth.unruled_methods());
    return out;
  }
};

ClientServer::ClientServer(Context* ctx, std::chrono::milliseconds watch_progress_interval,
                           std::chrono::milliseconds election_timeout)
    : ctx_(ctx), services_(new Services(ctx, watch_progress_interval, election_timeout)) {}

ClientServer::~ClientServer() { shutdown(0); }

Error ClientServer::start(const std::vector<std::string>& listen) {
  // etcd's interceptors run on every client method: a method left with
  // gRPC's generated handler would skip them, so none is served.
  if (std::vector<std::string> bad = services_->unruled_methods(); !bad.empty()) {
    return errors::internal("bug: client methods without the server-wide rules: " + fmt::format("{}", fmt::join(bad, ", ")));
  }
  grpc::ServerBuilder b;
  std::vector<int> ports(listen.size(), 0);
  for (size_t i = 0; i < listen.size(); ++i) {
    b.AddListeningPort(listen[i], grpc::InsecureServerCredentials(), &ports[i]);
  }
  b.SetMaxReceiveMessageSize(static_cast<int>(ctx_->limits.max_request_bytes + kGrpcOverheadBytes));
  b.SetMaxSendMessageSize(INT32_MAX);
  // etcd's keepalive enforcement defaults: clients may ping every 5 s.
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Fixed HTTP/2 windows of 1 MiB a stream, not grown by BDP probing: a
  // stream the server stops reading (a watch stream whose answers its client
  // does not read, watch_service.h) holds at most its window of requests in
  // gRPC. With probing, the window grew with the round trip, so with the
  // machine's load, to ~13 MiB (~40 MiB of server memory held for one such
  // stream; test_watch_stream_abuse). 1 MiB still takes a 1 MB put in one
  // window; 1 MB puts on loopback ran at the same rate either way
  // (bench/RESULTS.md, "Fixed HTTP/2 windows on the client URL").
  b.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  b.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  // No GRPC_ARG_MAX_CONCURRENT_STREAMS: the guard enforces it (server.h).
  b.RegisterService(&services_->kv);
  b.RegisterService(&services_->watch);
  b.RegisterService(&services_->lease);
  b.RegisterService(&services_->lock);
  b.RegisterService(&services_->election);
  b.RegisterService(&services_->maintenance);
  b.RegisterService(&services_->cluster);
  b.RegisterService(&services_->auth);
  b.RegisterCallbackGenericService(&services_->unknown);
  // grpc.health.v1.Health, which etcd serves on its client URLs (grpc-go's
  // health server, "" SERVING; an unknown service name is NOT_FOUND):
  // gRPC's own implementation, Check and Watch. It says NOT_SERVING once
  // the server shuts down. (The flag is read by every builder after this:
  // the peer server turns it off for itself, peer_server.cc.)
  grpc::EnableDefaultHealthCheckService(true);
  // grpc_server_* and etcd's byte counters (grpc_metrics.h).
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<GrpcMetrics>(
      std::vector<std::string>(std::begin(kClientServices), std::end(kClientServices)),
      // raw: watch_service.h, lease_service.h
      std::vector<std::string>{"/etcdserverpb.Watch/Watch", "/etcdserverpb.Lease/LeaseKeepAlive"}, unary_started_));
  b.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = b.BuildAndStart();
  if (!server_) return errors::internal("cannot start the client server");
  for (size_t i = 0; i < listen.size(); ++i) {
    if (ports[i] == 0) return errors::internal("cannot listen for clients on " + listen[i]);
  }
  return {};
}

void ClientServer::adopt(int fd) {
  // gRPC owns the socket from here, as one it accepted itself.
  grpc::AddInsecureChannelFromFd(server_.get(), fd);
}

std::shared_ptr<grpc::Channel> ClientServer::in_process_channel() {
  grpc::ChannelArguments args;
  // The server enforces the request limit; responses may be any size, as
  // etcd's gateway dials its own server (math.MaxInt32).
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return server_->InProcessChannel(args);
}

void ClientServer::shutdown(int grace_ms) {
  if (!server_) return;
  // First gRPC's own shutdown, through its C core (the C++ Shutdown below
  // would block here): every connection is sent GOAWAY, and no new call is
  // taken. Only then do the watch streams end with Unavailable. A client
  // that re-opens its watch at once (clientv3 retries Unavailable without a
  // pause) has then read the GOAWAY before the status, and dials again
  // (refused: Unavailable, retried). Without it, the re-opened stream
  // reached a server already shutting down, which cancels a call it will
  // not serve: the client saw Canceled and ended its watch for good
  // (clientv3's isHaltErr), as kube-apiserver logged at a member's SIGTERM.
  grpc_completion_queue* cq = grpc_completion_queue_create_for_pluck(nullptr);
  int tag = 0;
  grpc_server_shutdown_and_notify(server_->c_server(), cq, &tag);
  services_->watch.shutdown();
  // Watch streams end with Unavailable, which clients retry; one that is
  // still in flight at gRPC's deadline is canceled, which etcd's client
  // takes as the end of the watch. Give them time on a loaded machine.
  services_->watch.wait_streams_done(std::chrono::milliseconds(kWatchEndMs));
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server_->Wait();
  // The core notified both shutdowns when the last call ended.
  grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), nullptr);
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_destroy(cq);
  server_.reset();
}

}  // namespace etcdq::server
