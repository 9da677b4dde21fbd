#include "server/maintenance_service.h"

#include <thread>

#include <zlib.h>

#include "mvcc/range.h"
#include "member/pipeline.h"

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
  for (const auto& m : ctx_->node->members()) {
    if (m.id == ctx_->self.id) resp->set_islearner(m.learner);
  }
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
  if (refuse_call(*ctx_, c, reactor)) return reactor;
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
  member::propose(*ctx, std::move(cmd), [ctx, resp, reactor](apply::Result&& r) {
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
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  Context* ctx = ctx_;
  // A full RocksDB compaction reclaims what etcd's defrag reclaims, while
  // reads and writes go on. Run it off the gRPC thread.
  std::thread([ctx, reactor, resp] {
    Error e = ctx->store->engine()->compact_all();
    ctx->fill_header(resp->mutable_header(), /*with_revision=*/false);  // etcd's carries none
    finish(reactor, e);
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::MoveLeader(grpc::CallbackServerContext* c,
                                                         const etcdserverpb::MoveLeaderRequest* req,
                                                         etcdserverpb::MoveLeaderResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  Context* ctx = ctx_;
  // etcd: only the leader transfers its leadership (etcdctl finds it).
  if (!ctx->node->progress().is_leader) {
    finish(reactor, errors::not_leader());
    return reactor;
  }
  ctx->node->transfer_leadership(req->targetid(), [ctx, reactor, resp](Error e) {
    if (!e) ctx->fill_header(resp->mutable_header(), /*with_revision=*/false);  // etcd's carries none
    finish(reactor, e);
  });
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::HashKV(grpc::CallbackServerContext* c,
                                                     const etcdserverpb::HashKVRequest* req,
                                                     etcdserverpb::HashKVResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (refuse_call(*ctx_, c, reactor)) return reactor;
  auto view = ctx_->store->view();
  int64_t rev = req->revision() > 0 ? req->revision() : view->revision();
  uint32_t hash = 0;
  if (Error e = hash_kv(*view, rev, &hash)) {
    finish(reactor, e);
    return reactor;
  }
  resp->set_hash(hash);
  resp->set_compact_revision(view->compact_revision());
  ctx_->fill_header(resp->mutable_header());
  resp->mutable_header()->set_revision(view->revision());
  finish(reactor, {});
  return reactor;
}

Error hash_kv(const mvcc::ReadView& view, int64_t rev, uint32_t* out) {
  uLong crc = crc32(0L, Z_NULL, 0);
  auto add = [&](const void* p, size_t n) { crc = crc32(crc, static_cast<const Bytef*>(p), static_cast<uInt>(n)); };
  auto add_i64 = [&](int64_t v) { add(&v, sizeof v); };
  std::string from(1, '\0');
  for (;;) {
    mvcc::RangeOptions o;
    o.rev = rev;
    o.limit = 4096;
    mvcc::RangeResult r;
    if (Error e = mvcc::range(view, from, std::string(1, '\0'), o, view.revision(), view.compact_revision(), &r)) {
      return e;
    }
    for (const auto& kv : r.kvs) {
      add_i64(static_cast<int64_t>(kv.key().size()));
      add(kv.key().data(), kv.key().size());
      add_i64(kv.create_revision());
      add_i64(kv.mod_revision());
      add_i64(kv.version());
      add_i64(kv.lease());
      add_i64(static_cast<int64_t>(kv.value().size()));
      add(kv.value().data(), kv.value().size());
    }
    if (r.kvs.empty() || static_cast<int64_t>(r.kvs.size()) < o.limit) break;
    from = r.kvs.back().key() + '\0';
  }
  *out = static_cast<uint32_t>(crc);
  return {};
}

}  // namespace etcdq::server
