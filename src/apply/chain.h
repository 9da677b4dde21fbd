// The apply chain: every committed command passes through a fixed stack of
// layers, each of which either refuses it or hands it to the next, in the
// shape of etcd's applier chain (server/etcdserver/apply.go's applierV3,
// wrapped by corrupt.go's and apply.go's capped appliers, apply_auth.go's
// authApplierV3 and quota.go's quotaApplierV3). etcdq's chain, built by
// Applier (applier.h), top first:
//
//   corrupt  (corrupt_layer.h)  a CORRUPT alarm refuses all but Alarm
//   capped   (capped_layer.h)   a NOSPACE alarm refuses what adds data
//   auth     (auth_layer.h)     permissions and auth revision; auth management
//   plug-ins (plugin_layer.h)   one per key-space plug-in (keyspace/kind.h):
//                                gives the keys it owns their meaning
//   backend  (backend.h)        the KV, lease, alarm and member operations
//
// There is no quota layer: etcd's quotaApplierV3 compares the local backend
// size with the quota while applying, which members would answer
// differently, and etcdq's apply is deterministic (DESIGN.md). The quota is
// checked when a write is proposed (member/pipeline.cc, check_quota), which
// raises the NOSPACE alarm through the log; the capped layer does the rest.
//
// Thread-safety: a chain belongs to the apply thread.
#pragma once

#include <cstdint>
#include <string_view>

#include "apply/kv.h"
#include "apply/result.h"
#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcdq/command.pb.h"
#include "mvcc/writer.h"

namespace etcdq::apply {

// One command on its way down the chain.
struct ApplyCtx {
  mvcc::Writer& w;     // the entry's writer
  const Command& cmd;  // the whole command (its origin, time; the auth header later)
  // The key space the KV ops read and write through: plain unless a layer
  // that gives keys a meaning (plugin_layer.h) put its own before delegating.
  KeySpace* keys = &plain_keys();
};

// One layer. put, delete_range, txn and plugin_command are called inside one
// open Writer txn (run() brackets them with begin() and end(), so their
// writes share one main revision); the others outside any, since they end
// up writing meta records only or open their own txns (a lease revoke
// deletes its keys). A returned error is the client's (etcd's code and
// message); a layer that refuses changes nothing.
class Layer {
 public:
  virtual ~Layer() = default;
  // For logs and the tests of the chain's order.
  virtual std::string_view name() const = 0;

  // Entry hooks, called by Applier on every layer top to bottom: before an
  // entry's first command, after its last (before the batch is written),
  // and once the batch is committed at `revision`.
  virtual void begin_entry(mvcc::Writer& w) = 0;
  virtual void before_commit(mvcc::Writer& w) = 0;
  virtual void committed(int64_t revision) = 0;
  // The whole state was replaced by a snapshot's (Applier::restore): an
  // in-memory mirror of replicated state is reloaded from the database.
  virtual void restored() = 0;

  virtual Error put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) = 0;
  virtual Error delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                             etcdserverpb::DeleteRangeResponse* resp) = 0;
  virtual Error txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) = 0;
  // *wait_compaction: the revision a physical compaction must reach before
  // the client is answered (Result::wait_compaction).
  virtual Error compaction(ApplyCtx& c, const etcdserverpb::CompactionRequest& r,
                           etcdserverpb::CompactionResponse* resp, int64_t* wait_compaction) = 0;
  virtual Error lease_grant(ApplyCtx& c, const etcdserverpb::LeaseGrantRequest& r,
                            etcdserverpb::LeaseGrantResponse* resp) = 0;
  virtual Error lease_revoke(ApplyCtx& c, const etcdserverpb::LeaseRevokeRequest& r,
                             etcdserverpb::LeaseRevokeResponse* resp) = 0;
  virtual Error alarm(ApplyCtx& c, const etcdserverpb::AlarmRequest& r, etcdserverpb::AlarmResponse* resp) = 0;
  // A command that a key-space plug-in's kind owns (c.cmd; keyspace/kind.h,
  // owns_command), such as the leader's decisions for it; no client answer
  // but the error. Its plug-in's layer applies it.
  virtual Error plugin_command(ApplyCtx& c) = 0;
  // A member publishing its attributes (members.h); no client answer.
  virtual Error member_attributes(ApplyCtx& c, const MemberAttributes& m) = 0;
  // Auth management (c.cmd is one of the auth_* / user_* / role_*
  // commands): the auth layer applies it to the auth store (auth/store.h);
  // the answer is the error alone (etcd's responses carry only a header).
  virtual Error auth_management(ApplyCtx& c) = 0;
};

// A layer that hands everything to the next one: a layer derives from it
// and overrides only what it refuses or changes (as etcd's appliers embed
// the applierV3 they wrap).
class Forwarding : public Layer {
 public:
  explicit Forwarding(Layer* next) : next_(next) {}

  void begin_entry(mvcc::Writer& w) override { next_->begin_entry(w); }
  void before_commit(mvcc::Writer& w) override { next_->before_commit(w); }
  void committed(int64_t revision) override { next_->committed(revision); }
  void restored() override { next_->restored(); }

  Error put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) override {
    return next_->put(c, r, resp);
  }
  Error delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                     etcdserverpb::DeleteRangeResponse* resp) override {
    return next_->delete_range(c, r, resp);
  }
  Error txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) override {
    return next_->txn(c, r, resp);
  }
  Error compaction(ApplyCtx& c, const etcdserverpb::CompactionRequest& r, etcdserverpb::CompactionResponse* resp,
                   int64_t* wait_compaction) override {
    return next_->compaction(c, r, resp, wait_compaction);
  }
  Error lease_grant(ApplyCtx& c, const etcdserverpb::LeaseGrantRequest& r,
                    etcdserverpb::LeaseGrantResponse* resp) override {
    return next_->lease_grant(c, r, resp);
  }
  Error lease_revoke(ApplyCtx& c, const etcdserverpb::LeaseRevokeRequest& r,
                     etcdserverpb::LeaseRevokeResponse* resp) override {
    return next_->lease_revoke(c, r, resp);
  }
  Error alarm(ApplyCtx& c, const etcdserverpb::AlarmRequest& r, etcdserverpb::AlarmResponse* resp) override {
    return next_->alarm(c, r, resp);
  }
  Error plugin_command(ApplyCtx& c) override { return next_->plugin_command(c); }
  Error member_attributes(ApplyCtx& c, const MemberAttributes& m) override {
    return next_->member_attributes(c, m);
  }
  Error auth_management(ApplyCtx& c) override { return next_->auth_management(c); }

 protected:
  Layer& next() const { return *next_; }

 private:
  Layer* next_;
};

// Runs one decoded command down the chain from `head`: calls the method of
// its kind, brackets it with the writer's txn as Layer says, and fills
// `out` (error, and the response of the command's kind, which the client
// reads only when there is no error). A command of no known kind gets
// errors::internal.
void run(Layer& head, ApplyCtx& c, Result* out);

}  // namespace etcdq::apply
