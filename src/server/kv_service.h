// etcd's KV service (Range, Put, DeleteRange, Txn, Compact) on the gRPC
// callback API: no thread waits for a proposal. Writes are validated here
// (etcd's v3rpc/key.go checks), proposed, and answered from the apply
// result; reads are served from the newest published view once the read
// barrier allows (serializable reads at once).
#pragma once

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "server/context.h"
#include "server/request_parsing.h"

namespace etcdq::server {

class KvService final : public StrictParsing<etcdserverpb::KV> {
 public:
  explicit KvService(Context* ctx) : ctx_(ctx) {
    ParseLimits l = parse_limits(ctx->limits.max_txn_ops);
    strict_parsing("Range", &KvService::Range, l);
    strict_parsing("Put", &KvService::Put, l);
    strict_parsing("DeleteRange", &KvService::DeleteRange, l);
    strict_parsing("Txn", &KvService::Txn, l);
    strict_parsing("Compact", &KvService::Compact, l);
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
