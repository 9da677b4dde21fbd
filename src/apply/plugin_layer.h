// A key-space plug-in's layer of the apply chain (chain.h), one for each
// instance a member opened (keyspace/kind.h): how a plug-in such as the
// work queues plugs into apply, so that the KV ops (kv.h) and the backend
// (backend.h) know nothing of it. The keys the plug-in's kind owns take
// their meaning from PluginKeys, a key space (kv.h), wherever a KV op meets
// them, top-level or inside a Txn: reads and deletes of its ranges are
// mapped by the kind, and Puts of its keys go to the instance. The layer
// also hands the instance the commands its kind owns, and the entry hooks.
//
// Thread-safety: the layer belongs to the apply thread. PluginKeys'
// read_range and delete_range are pure and may be used by any thread (the
// member's readers do, through member/context.h).
#pragma once

#include "apply/chain.h"
#include "apply/kv.h"
#include "keyspace/kind.h"

namespace etcdq::apply {

class PluginKeys final : public KeySpace {
 public:
  explicit PluginKeys(keyspace::Instance* instance) : instance_(instance) {}
  void read_range(std::string* key, std::string* end) const override;
  void delete_range(std::string* key, std::string* end) const override;
  // A key the kind owns goes to the instance (Instance::put), any other is
  // stored as etcd does (put_plain).
  Error put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, int64_t time_ms,
            etcdserverpb::PutResponse* resp) override;

 private:
  keyspace::Instance* instance_;
};

class PluginLayer final : public Forwarding {
 public:
  PluginLayer(keyspace::Instance* instance, Layer* next) : Forwarding(next), instance_(instance), keys_(instance) {}
  // The kind's name ("queue").
  std::string_view name() const override { return instance_->kind().name(); }
  KeySpace& keys() { return keys_; }

  void begin_entry(mvcc::Writer& w) override;
  void before_commit(mvcc::Writer& w) override;
  void committed(int64_t revision) override;
  void restored() override;

  Error put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) override;
  Error delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                     etcdserverpb::DeleteRangeResponse* resp) override;
  Error txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) override;
  // The instance applies the commands its kind owns; others go below.
  Error plugin_command(ApplyCtx& c) override;

 private:
  keyspace::Instance* instance_;
  PluginKeys keys_;
};

}  // namespace etcdq::apply
