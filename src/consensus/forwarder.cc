#include "consensus/forwarder.h"

#include <fmt/format.h>

#include <condition_variable>
#include <thread>

namespace etcdq::consensus {

std::string url_to_target(const std::string& url) {
  auto p = url.find("://");
  if (p == std::string::npos) return "";
  std::string rest = url.substr(p + 3);
  auto slash = rest.find('/');
  if (slash != std::string::npos) rest.resize(slash);
  return rest;
}

namespace {
std::mutex peer_credentials_mu;
std::shared_ptr<grpc::ChannelCredentials> peer_credentials;  // guarded by peer_credentials_mu
}  // namespace

void Forwarder::set_peer_credentials(std::shared_ptr<grpc::ChannelCredentials> creds) {
  std::lock_guard<std::mutex> lock(peer_credentials_mu);
  peer_credentials = std::move(creds);
}

std::shared_ptr<grpc::Channel> Forwarder::make_channel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // A restarted leader should be reachable again quickly.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // After a failed connect the channel waits for the target's name to be
  // resolved again, at most once every 30 s by default: a channel made
  // while its member was down kept failing ("Connection refused") for
  // 20-30 s after the member was back (a start-time state fetch served
  // 23.7 s after its peers did, 3.7 s with this).
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 500);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  {
    std::lock_guard<std::mutex> lock(peer_credentials_mu);
    creds = peer_credentials;
  }
  return grpc::CreateCustomChannel(target, creds ? creds : grpc::InsecureChannelCredentials(), args);
}

std::shared_ptr<grpc::Channel> Forwarder::channel(const std::string& target) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& ch = channels_[target];
  if (!ch) ch = make_channel(target);
  return ch;
}

Error Forwarder::from_status(const grpc::Status& s) {
  if (s.ok()) return {};
  const std::string& m = s.error_message();
  if (m.rfind("etcdserver:", 0) == 0 || m.rfind("mvcc:", 0) == 0) {
    return Error(static_cast<Code>(s.error_code()), m);
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return errors::timeout();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::CANCELLED) {
    return errors::leader_changed();
  }
  return Error(static_cast<Code>(s.error_code()), m);
}

bool Forwarder::never_sent(const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  const std::string& m = s.error_message();
  return m.find("failed to connect") != std::string::npos || m.find("Connection refused") != std::string::npos;
}

namespace {

template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

}  // namespace

void Forwarder::propose(const std::string& target, std::vector<std::string> commands, Timeout timeout,
                        std::function<void(Error)> done) {
  auto* c = new Call<peer::ProposeRequest, peer::ProposeResponse>();
  for (auto& cmd : commands) c->req.add_commands(std::move(cmd));
  c->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto stub = peer::Peer::NewStub(channel(target));
  stub->async()->Propose(&c->ctx, &c->req, &c->resp, [c, done = std::move(done)](grpc::Status s) {
    // Unsent is as good as refused by a non-leader: the caller sends again.
    done(never_sent(s) ? errors::not_leader() : from_status(s));
    delete c;
  });
}

void Forwarder::read_index(const std::string& target, Timeout timeout,
                           std::function<void(Error, uint64_t)> done) {
  auto* c = new Call<peer::ReadIndexRequest, peer::ReadIndexResponse>();
  c->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto stub = peer::Peer::NewStub(channel(target));
  stub->async()->ReadIndex(&c->ctx, &c->req, &c->resp, [c, done = std::move(done)](grpc::Status s) {
    done(from_status(s), c->resp.index());
    delete c;
  });
}

void Forwarder::lease_keep_alive(const std::string& target, int64_t id, Timeout timeout,
                                 std::function<void(Error, int64_t)> done) {
  auto* c = new Call<etcdserverpb::LeaseKeepAliveRequest, etcdserverpb::LeaseKeepAliveResponse>();
  c->req.set_id(id);
  c->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto stub = peer::Peer::NewStub(channel(target));
  stub->async()->LeaseKeepAlive(&c->ctx, &c->req, &c->resp, [c, done = std::move(done)](grpc::Status s) {
    done(from_status(s), c->resp.ttl());
    delete c;
  });
}

void Forwarder::removed(const std::string& target, uint64_t id) {
  auto* c = new Call<peer::RemovedRequest, peer::RemovedResponse>();
  c->req.set_id(id);
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto stub = peer::Peer::NewStub(channel(target));
  stub->async()->Removed(&c->ctx, &c->req, &c->resp, [c](grpc::Status) { delete c; });
}

void Forwarder::attributes(const std::string& target, Timeout timeout,
                           std::function<void(Error, const apply::MemberAttributes&)> done) {
  auto* c = new Call<peer::AttributesRequest, apply::MemberAttributes>();
  c->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto stub = peer::Peer::NewStub(channel(target));
  stub->async()->Attributes(&c->ctx, &c->req, &c->resp, [c, done = std::move(done)](grpc::Status s) {
    done(from_status(s), c->resp);
    delete c;
  });
}

void Forwarder::hash_kv(const std::string& target, int64_t revision, uint64_t cluster_id, Timeout timeout,
                        std::function<void(Error, const peer::HashKVResponse&)> done) {
  auto* c = new Call<peer::HashKVRequest, peer::HashKVResponse>();
  c->req.set_revision(revision);
  c->req.set_cluster_id(cluster_id);
  c->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto stub = peer::Peer::NewStub(channel(target));
  stub->async()->HashKV(&c->ctx, &c->req, &c->resp, [c, done = std::move(done)](grpc::Status s) {
    // The status as it came (not from_status's "leader changed"): the
    // caller logs why this peer could not be compared.
    done(s.ok() ? Error() : Error(static_cast<Code>(s.error_code()), s.error_message()), c->resp);
    delete c;
  });
}

void Forwarder::configuration(const std::string& target, Timeout timeout,
                              std::function<void(Error, const peer::ConfigurationResponse&)> done) {
  auto* c = new Call<peer::ConfigurationRequest, peer::ConfigurationResponse>();
  c->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto stub = peer::Peer::NewStub(channel(target));
  stub->async()->Configuration(&c->ctx, &c->req, &c->resp, [c, done = std::move(done)](grpc::Status s) {
    done(from_status(s), c->resp);
    delete c;
  });
}

void Forwarder::report(const std::string& target, const google::protobuf::Message& report) {
  const auto* req = dynamic_cast<const peer::QueueConsumersRequest*>(&report);
  if (req == nullptr) return;
  auto* c = new Call<peer::QueueConsumersRequest, peer::QueueConsumersResponse>();
  c->req = *req;
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  auto stub = peer::Peer::NewStub(channel(target));
  stub->async()->QueueConsumers(&c->ctx, &c->req, &c->resp, [c](grpc::Status) { delete c; });
}

Error Forwarder::fetch_snapshot(const std::string& target, uint64_t index,
                                const std::function<Error(const peer::SnapshotChunk&)>& fn) {
  auto stub = peer::Peer::NewStub(channel(target));
  grpc::ClientContext ctx;
  peer::FetchSnapshotRequest req;
  req.set_index(index);
  req.set_packed(true);  // the pairs packed (common/state_pairs.h)
  req.set_without_latest(true);  // each value once (mvcc/derive.h)
  auto reader = stub->FetchSnapshot(&ctx, req);
  // A source that stops sending (stopped, partitioned) must not hold this
  // member forever: cancel after kInactivityLimit without a chunk.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool silent = false;  // cancelled by the watchdog: said so, not as gRPC's bare CANCELLED
  auto last_progress = std::chrono::steady_clock::now();
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return done; })) {
      if (std::chrono::steady_clock::now() - last_progress > kInactivityLimit) {
        silent = true;
        ctx.TryCancel();
        return;
      }
    }
  });
  peer::SnapshotChunk chunk;
  bool last = false;
  Error failed;
  // The rate floor's window (kProgressFloor).
  auto window_start = std::chrono::steady_clock::now();
  uint64_t window_bytes = 0;
  while (reader->Read(&chunk)) {
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mu);
      last_progress = now;
    }
    if (last) {
      // The state was complete: anything after it is not part of it (a
      // sender that sent pairs past `last` had them installed: attack4).
      failed = errors::internal("the snapshot from " + target + " went on after its last chunk");
      ctx.TryCancel();
      break;
    }
    window_bytes += chunk.ByteSizeLong();
    if (const auto took = now - window_start; !chunk.last() && took >= kProgressWindow) {
      const double s = std::chrono::duration<double>(took).count();
      if (static_cast<double>(window_bytes) < s * kProgressFloor) {
        failed = errors::internal(fmt::format(
            "the snapshot from {} is too slow: {} bytes in the last {:.1f} s, below the floor of {} bytes a second",
            target, window_bytes, s, kProgressFloor));
        ctx.TryCancel();
        break;
      }
      window_start = now;
      window_bytes = 0;
    }
    if (Error e = fn(chunk)) {
      failed = e;
      ctx.TryCancel();
      break;
    }
    last = chunk.last();
  }
  grpc::Status s = reader->Finish();
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  if (failed) return failed;
  if (silent && !s.ok()) {
    return errors::internal("the snapshot from " + target + " sent nothing for " +
                            std::to_string(kInactivityLimit.count()) + " s");
  }
  if (!s.ok()) return errors::internal("fetching the snapshot at index " + std::to_string(index) + " from " +
                                       target + ": " + s.error_message());
  if (!last) return errors::internal("the snapshot from " + target + " ended early");
  return {};
}

}  // namespace etcdq::consensus
