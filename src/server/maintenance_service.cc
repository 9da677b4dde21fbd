#include "server/maintenance_service.h"

#include <thread>

namespace etcdq::server {

grpc::ServerUnaryReactor* MaintenanceService::Status(grpc::CallbackServerContext* c,
                                                     const etcdserverpb::StatusRequest*,
                                                     etcdserverpb::StatusResponse* resp) {
  auto* reactor = c->DefaultReactor();
  raft::Progress p = ctx_->node->progress();
  resp->set_version(kEtcdApiVersion);
  resp->set_dbsize(ctx_->store->engine()->size_bytes());
  resp->set_dbsizeinuse(ctx_->store->engine()->in_use_bytes());
  resp->set_leader(p.leader_id);
  resp->set_raftindex(p.commit_index);
  resp->set_raftterm(p.term);
  resp->set_raftappliedindex(p.applied_index);
  resp->set_islearner(false);
  for (const auto& a : ctx_->alarms->list(0, etcdserverpb::NONE)) {
    resp->add_errors("memberID:" + std::to_string(a.memberid()) + " alarm:" + etcdserverpb::AlarmType_Name(a.alarm()) +
                     " ");
  }
  ctx_->fill_header(resp->mutable_header());
  finish(reactor, {});
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::Alarm(grpc::CallbackServerContext* c,
                                                    const etcdserverpb::AlarmRequest* req,
                                                    etcdserverpb::AlarmResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  // etcd's alarm answers carry no revision in their header.
  if (req->action() == etcdserverpb::AlarmRequest::GET) {
    for (auto& m : ctx->alarms->list(req->memberid(), req->alarm())) *resp->add_alarms() = std::move(m);
    ctx->fill_header(resp->mutable_header(), /*with_revision=*/false);
    finish(reactor, {});
    return reactor;
  }
  apply::Command cmd;
  *cmd.mutable_alarm() = *req;
  ctx->node->propose(std::move(cmd), [ctx, resp, reactor](apply::Result&& r) {
    if (r.error) return finish(reactor, r.error);
    if (auto* out = std::get_if<etcdserverpb::AlarmResponse>(&r.response)) resp->Swap(out);
    ctx->fill_header(resp->mutable_header(), /*with_revision=*/false);
    finish(reactor, {});
  });
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::Defragment(grpc::CallbackServerContext* c,
                                                         const etcdserverpb::DefragmentRequest*,
                                                         etcdserverpb::DefragmentResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  // A full RocksDB compaction reclaims what etcd's defrag reclaims, while
  // reads and writes go on. Run it off the gRPC thread.
  std::thread([ctx, reactor, resp] {
    auto* db = ctx->store->engine()->db();
    rocksdb::CompactRangeOptions o;
    Error e;
    for (int i = 0; i < storage::kCfCount; ++i) {
      auto s = db->CompactRange(o, ctx->store->engine()->cf(static_cast<storage::Cf>(i)), nullptr, nullptr);
      if (!s.ok()) e = errors::internal("defragment failed: " + s.ToString());
    }
    ctx->fill_header(resp->mutable_header());
    finish(reactor, e);
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::MemberList(grpc::CallbackServerContext* c,
                                                     const etcdserverpb::MemberListRequest*,
                                                     etcdserverpb::MemberListResponse* resp) {
  auto* reactor = c->DefaultReactor();
  for (const auto& m : ctx_->members) {
    auto* out = resp->add_members();
    out->set_id(m.id);
    out->set_name(m.name);
    for (const auto& u : m.peer_urls) out->add_peerurls(u);
    for (const auto& u : m.client_urls) out->add_clienturls(u);
  }
  ctx_->fill_header(resp->mutable_header(), /*with_revision=*/false);
  finish(reactor, {});
  return reactor;
}

}  // namespace etcdq::server
