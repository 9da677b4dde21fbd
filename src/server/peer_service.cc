#include "server/peer_service.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/state_pairs.h"
#include "member/corruption_check.h"
#include "member/forwarded.h"
#include "member/leases.h"
#include "member/maintenance.h"
#include "member/peers.h"
#include "member/pipeline.h"
#include "server/blocking_writer.h"
#include "server/cluster_service.h"
#include "server/forwarded_calls.h"
#include "server/lease_service.h"

namespace etcdq::server {
namespace {

constexpr size_t kSnapshotChunkBytes = 1 << 20;

// A receiver that takes no chunk for this long is cut off, so that a stalled
// (or hostile) caller cannot hold one of the kMaxSnapshotSenders for good.
constexpr std::chrono::seconds kReceiverStallLimit{30};

class SnapshotWriter final : public BlockingWriter<peer::SnapshotChunk> {
 public:
  // `senders` counts the writers alive; one over `limit` finishes at once
  // with RESOURCE_EXHAUSTED (the installing member tries another source,
  // and libraft retries the snapshot later).
  SnapshotWriter(grpc::CallbackServerContext* call, Context* ctx, const peer::FetchSnapshotRequest& req,
                 std::shared_ptr<std::atomic<int>> senders, int limit)
      : BlockingWriter(call, kReceiverStallLimit),
        ctx_(ctx),
        index_(req.index()),
        packed_(req.packed()),
        without_latest_(req.without_latest()),
        senders_(std::move(senders)) {
    if (senders_->fetch_add(1) >= limit) {
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many snapshot transfers at once"));
      return;
    }
    std::thread([this] { run(); }).detach();
  }
  ~SnapshotWriter() override { senders_->fetch_sub(1); }

  void OnDone() override { delete this; }

 private:
  void run() {
    size_t bytes = 0;
    bool gone = false;
    // The send's phases, logged: the installer's log says how long it took
    // as a whole, this one how much of it the sender waited for the
    // receiver to take a chunk.
    const auto started = std::chrono::steady_clock::now();
    std::chrono::steady_clock::duration waited{};
    uint64_t pairs = 0, total = 0;
    // Two chunks, alternating: one is being written while the next fills,
    // so reading the state and the transfer overlap (an install spent 70-85%
    // of its time waiting for chunks when each was filled only after the
    // one before had been taken).
    peer::SnapshotChunk* filling = &chunks_[0];
    Error e = member::maintenance::read_state(*ctx_, index_, without_latest_, [&](uint32_t cf, std::string_view key,
                                                                       std::string_view value) -> Error {
      if (packed_) {
        // One copy a pair, no message a pair (common/state_pairs.h).
        std::string* out = filling->mutable_packed();
        if (out->capacity() < kSnapshotChunkBytes + state_pairs::kRecordOverhead) {
          out->reserve(kSnapshotChunkBytes + state_pairs::kRecordOverhead);
        }
        state_pairs::append(out, cf, key, value);
      } else {
        auto* p = filling->add_pairs();
        p->set_cf(cf);
        p->set_key(key.data(), key.size());
        p->set_value(value.data(), value.size());
      }
      bytes += key.size() + value.size() + 8;
      ++pairs;
      total += key.size() + value.size();
      if (bytes < kSnapshotChunkBytes) return {};
      crc_ = state_pairs::checksum(crc_, filling->packed());
      const auto wait_from = std::chrono::steady_clock::now();
      const bool sent = start(filling);
      waited += std::chrono::steady_clock::now() - wait_from;
      if (!sent) {
        gone = true;
        return Error(Code::kCancelled, "the receiver went away");
      }
      filling = filling == &chunks_[0] ? &chunks_[1] : &chunks_[0];
      filling->Clear();  // the write before it was taken (start waited)
      bytes = 0;
      return {};
    });
    if (!e) {
      filling->set_last(true);
      if (packed_) filling->set_packed_crc32(state_pairs::checksum(crc_, filling->packed()));
      if (!send(filling)) gone = true;
    } else if (!gone && !wait_written()) {
      gone = true;
    }
    if (!e && !gone) {
      using Seconds = std::chrono::duration<double>;
      spdlog::info("sent the state at index {} or later to {}: {} pairs, {} bytes in {:.3f} s (waiting for it to take "
                   "them {:.3f} s)",
                   index_, call_->peer(), pairs, total, Seconds(std::chrono::steady_clock::now() - started).count(),
                   Seconds(waited).count());
    }
    if (e && !gone) {
      Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, e.message()));
    } else {
      Finish(gone ? grpc::Status::CANCELLED : grpc::Status::OK);
    }
    // Finish may have run OnDone (and deleted this) already: nothing after it.
  }

  Context* ctx_;
  uint64_t index_;
  bool packed_;  // the installer reads SnapshotChunk.packed
  bool without_latest_;  // the installer rebuilds latest
  uint32_t crc_ = 0;  // of the chunks sent (SnapshotChunk.packed_crc32)
  std::shared_ptr<std::atomic<int>> senders_;
  peer::SnapshotChunk chunks_[2];
};

}  // namespace

bool PeerService::is_member(uint64_t id) const {
  for (const auto& m : ctx_->membership->members()) {
    if (m.id == id) return true;
  }
  return false;
}

std::string PeerService::peer_address(uint64_t id) const {
  for (const auto& m : ctx_->membership->members()) {
    if (m.id == id) return m.address;
  }
  return "";
}

PeerService::PeerService(Context* ctx) : ctx_(ctx) {}

PeerService::~PeerService() {
  std::lock_guard<std::mutex> lock(alive_->mu);
  alive_->alive = false;
}

void PeerService::confirm_removal() {
  Context* ctx = ctx_;
  std::shared_ptr<Alive> alive = alive_;
  uint64_t self = ctx->self.id;
  for (const auto& m : ctx->membership->members()) {
    if (m.id == self || m.address.empty()) continue;
    uint64_t asked = m.id;
    member::peers::ask_configuration(
        *ctx, m.address, std::chrono::seconds(2),
        [ctx, alive, self, asked](Error e, const peer::ConfigurationResponse& r) {
          if (e || r.leader() != asked) return;
          for (uint64_t id : r.members()) {
            if (id == self) return;
          }
          std::lock_guard<std::mutex> lock(alive->mu);
          if (alive->alive) member::peers::stop_removed(*ctx);
        });
  }
}

grpc::ServerUnaryReactor* PeerService::Propose(grpc::CallbackServerContext* c, const peer::ProposeRequest* req,
                                               peer::ProposeResponse*) {
  auto* reactor = c->DefaultReactor();
  if (!ctx_->consensus->progress().is_leader) {
    finish(reactor, errors::not_leader());
    return reactor;
  }
  // Decoded and checked as a client request would be: nothing that cannot
  // be applied enters the log, whoever sent it (a peer with a bad build, or
  // anyone who can reach the peer URL while it has no TLS).
  std::vector<std::string> cmds;
  std::vector<apply::MemberAttributes> claimed;
  cmds.reserve(req->commands_size());
  for (const auto& framed : req->commands()) {
    apply::Command cmd;
    Error e = member::admit_forwarded(*ctx_, framed, &cmd);
    if (!e && cmd.has_member_attributes()) {
      if (peer_address(cmd.member_attributes().id()).empty()) {
        e = Error(Code::kInvalidArgument, "etcdserver: malformed command: attributes of an unknown member");
      } else {
        claimed.push_back(cmd.member_attributes());
      }
    }
    if (e) {
      finish(reactor, e);
      return reactor;
    }
    cmds.push_back(framed);
  }
  if (cmds.empty()) {
    finish(reactor, {});
    return reactor;
  }
  Context* ctx = ctx_;
  auto propose = [ctx, reactor](std::vector<std::string>&& cmds) {
    member::peers::propose_forwarded(*ctx, std::move(cmds), [reactor](Error e) { finish(reactor, e); });
  };
  if (claimed.empty()) {
    propose(std::move(cmds));
    return reactor;
  }
  // Published attributes decide where clients are sent (member list, the
  // Cluster proxy): only the member itself, asked at the peer address in
  // the configuration, can confirm them.
  struct Check {
    std::mutex mu;
    size_t left;
    bool ok = true;
    std::vector<std::string> cmds;
  };
  auto check = std::make_shared<Check>();
  check->left = claimed.size();
  check->cmds = std::move(cmds);
  for (const auto& a : claimed) {
    member::peers::ask_attributes(
        *ctx, peer_address(a.id()), std::chrono::seconds(2),
        [check, a, propose, reactor](Error e, const apply::MemberAttributes& told) {
          bool last;
          {
            std::lock_guard<std::mutex> lock(check->mu);
            if (e || told.SerializeAsString() != a.SerializeAsString()) check->ok = false;
            last = --check->left == 0;
          }
          if (!last) return;
          if (!check->ok) {
            return finish(reactor, Error(Code::kInvalidArgument,
                                         "etcdserver: malformed command: attributes not confirmed by the member"));
          }
          propose(std::move(check->cmds));
        });
  }
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::ReadIndex(grpc::CallbackServerContext* c, const peer::ReadIndexRequest*,
                                                 peer::ReadIndexResponse* resp) {
  auto* reactor = c->DefaultReactor();
  member::peers::read_index(*ctx_, [reactor, resp](Error e, uint64_t index) {
    resp->set_index(index);
    finish(reactor, e);
  });
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::LeaseKeepAlive(grpc::CallbackServerContext* c,
                                                      const etcdserverpb::LeaseKeepAliveRequest* req,
                                                      etcdserverpb::LeaseKeepAliveResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (!ctx_->consensus->progress().is_leader) {
    finish(reactor, errors::not_leader());
    return reactor;
  }
  resp->set_id(req->id());
  resp->set_ttl(member::leases::renew(*ctx_, req->id()));
  ctx_->fill_header(resp->mutable_header());
  finish(reactor, {});
  return reactor;
}

bool PeerService::refuse_forwarded_admin(const peer::ForwardedAuth& a, grpc::ServerUnaryReactor* reactor) const {
  Error e;
  if (!ctx_->consensus->progress().is_leader) e = errors::not_leader();
  member::Caller who = caller_of_forwarded(a);
  if (!e) e = check_forwarded_revision(*ctx_, who);
  if (!e) e = member::check_admin(*ctx_, who);
  if (!e) return false;
  finish(reactor, e);
  return true;
}

grpc::ServerUnaryReactor* PeerService::LeaseTimeToLive(grpc::CallbackServerContext* c,
                                                       const peer::ForwardedLeaseTimeToLive* req,
                                                       etcdserverpb::LeaseTimeToLiveResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Error e;
  if (!ctx_->consensus->progress().is_leader) e = errors::not_leader();
  member::Caller who = caller_of_forwarded(req->auth());
  if (!e) e = check_forwarded_revision(*ctx_, who);
  if (!e) e = member::check_lease_time_to_live(*ctx_, who, req->request().id(), req->request().keys());
  if (!e) member::leases::time_to_live(*ctx_, req->request(), resp);
  finish(reactor, e);
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::MemberAdd(grpc::CallbackServerContext* c, const peer::ForwardedMemberAdd* req,
                                                 etcdserverpb::MemberAddResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_forwarded_admin(req->auth(), reactor)) return reactor;
  member_add(ctx_, req->request(), resp, [reactor](Error e) { finish(reactor, e); });
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::MemberRemove(grpc::CallbackServerContext* c,
                                                    const peer::ForwardedMemberRemove* req,
                                                    etcdserverpb::MemberRemoveResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_forwarded_admin(req->auth(), reactor)) return reactor;
  member_remove(ctx_, req->request(), resp, [reactor](Error e) { finish(reactor, e); });
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::MemberPromote(grpc::CallbackServerContext* c,
                                                     const peer::ForwardedMemberPromote* req,
                                                     etcdserverpb::MemberPromoteResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_forwarded_admin(req->auth(), reactor)) return reactor;
  member_promote(ctx_, req->request(), resp, [reactor](Error e) { finish(reactor, e); });
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::Removed(grpc::CallbackServerContext* c, const peer::RemovedRequest* req,
                                               peer::RemovedResponse*) {
  auto* reactor = c->DefaultReactor();
  // Anyone who reaches the peer URL could send this: it is checked with the
  // leader before this member stops.
  if (req->id() == ctx_->self.id) confirm_removal();
  finish(reactor, {});
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::Attributes(grpc::CallbackServerContext* c, const peer::AttributesRequest*,
                                                  apply::MemberAttributes* resp) {
  auto* reactor = c->DefaultReactor();
  *resp = member::peers::self_attributes(*ctx_);
  finish(reactor, {});
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::Configuration(grpc::CallbackServerContext* c,
                                                     const peer::ConfigurationRequest*,
                                                     peer::ConfigurationResponse* resp) {
  auto* reactor = c->DefaultReactor();
  const auto progress = ctx_->consensus->progress();
  resp->set_leader(progress.leader_id);
  resp->set_last_index(progress.last_index);
  resp->set_is_leader(progress.is_leader);
  for (const auto& m : ctx_->membership->members()) {
    resp->add_members(m.id);
    resp->add_addresses(m.address);
  }
  finish(reactor, {});
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::QueueConsumers(grpc::CallbackServerContext* c,
                                                      const peer::QueueConsumersRequest* req,
                                                      peer::QueueConsumersResponse*) {
  auto* reactor = c->DefaultReactor();
  // Only members' reports count; the key-space plug-in they are for takes
  // them (keyspace/kind.h, peer_report).
  if (is_member(req->member())) member::peers::plugin_report(*ctx_, req->member(), *req);
  finish(reactor, {});
  return reactor;
}

grpc::ServerUnaryReactor* PeerService::HashKV(grpc::CallbackServerContext* c, const peer::HashKVRequest* req,
                                              peer::HashKVResponse* resp) {
  auto* reactor = c->DefaultReactor();
  // Anyone who reaches the peer URL can ask (peer TLS decides who can): the
  // request is checked whole, and the answer says only a CRC of the state.
  if (req->ByteSizeLong() > kMaxHashRequestBytes) {
    finish(reactor, Error(Code::kInvalidArgument, "malformed hash request: too large"));
    return reactor;
  }
  if (req->revision() < 0) {
    finish(reactor, Error(Code::kInvalidArgument, "malformed hash request: negative revision"));
    return reactor;
  }
  // etcd's X-Etcd-Cluster-ID check (corrupt.go hashKVHandler): members of
  // another cluster that happen to reach us compare nothing.
  if (req->cluster_id() != ctx_->current_cluster_id()) {
    finish(reactor, Error(Code::kFailedPrecondition, member::kClusterIdMismatch));
    return reactor;
  }
  if (hashes_->fetch_add(1) >= kMaxHashes) {
    hashes_->fetch_sub(1);
    finish(reactor, Error(Code::kResourceExhausted, "etcdserver: too many hash requests in progress"));
    return reactor;
  }
  Context* ctx = ctx_;
  int64_t rev = req->revision();
  // A full pass over the key space: off the gRPC thread.
  std::thread([ctx, reactor, resp, rev, hashes = hashes_] {
    member::maintenance::KvHash h;
    Error e = member::maintenance::hash_kv(*ctx, rev, &h);
    if (!e) {
      resp->set_member_id(ctx->self.id);
      resp->set_cluster_id(ctx->current_cluster_id());
      resp->set_revision(h.revision);
      resp->set_hash_revision(h.hash_revision);
      resp->set_hash(h.hash);
      resp->set_compact_revision(h.compact_revision);
    }
    hashes->fetch_sub(1);
    finish(reactor, e);
  }).detach();
  return reactor;
}

grpc::ServerWriteReactor<peer::SnapshotChunk>* PeerService::FetchSnapshot(grpc::CallbackServerContext* c,
                                                                          const peer::FetchSnapshotRequest* req) {
  return new SnapshotWriter(c, ctx_, *req, snapshot_senders_, kMaxSnapshotSenders);
}

}  // namespace etcdq::server
