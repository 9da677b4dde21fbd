// etcd's KV service (Range, Put, DeleteRange, Txn, Compact) on the gRPC
// callback API: no thread waits for a proposal. Writes are proposed through
// the member's pipeline (member/pipeline.h checks them) and answered from
// the apply result (member/answers.h); Range and read-only Txns take the
// member's read path (member/reads.h: serializable at once, linearizable
// after the read barrier).
#pragma once

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "server/context.h"
#include "server/ruled_service.h"

namespace etcdq::server {

class KvService final : public RuledService<etcdserverpb::KV> {
 public:
  explicit KvService(Context* ctx) : RuledService(ctx), ctx_(ctx) {
    ParseLimits l = parse_limits(ctx->limits.max_txn_ops);
    unary("Range", &KvService::Range, l);
    unary("Put", &KvService::Put, l);
    unary("DeleteRange", &KvService::DeleteRange, l);
    unary("Txn", &KvService::Txn, l);
    unary("Compact", &KvService::Compact, l);
  }

  grpc::ServerUnaryReactor* Range(grpc::CallbackServerContext* c, const etcdserverpb::RangeRequest* req,
                                  etcdserverpb::RangeResponse* resp) override;
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* c, const etcdserverpb::PutRequest* req,
                                etcdserverpb::PutResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteRange(grpc::CallbackServerContext* c,
                                        const etcdserverpb::DeleteRangeRequest* req,
                                        etcdserverpb::DeleteRangeResponse* resp) override;
  grpc::ServerUnaryReactor* Txn(grpc::CallbackServerContext* c, const etcdserverpb::TxnRequest* req,
                                etcdserverpb::TxnResponse* resp) override;
  grpc::ServerUnaryReactor* Compact(grpc::CallbackServerContext* c,
                                    const etcdserverpb::CompactionRequest* req,
                                    etcdserverpb::CompactionResponse* resp) override;

 private:
  Context* ctx_;
};

}  // namespace etcdq::server
