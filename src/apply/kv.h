// etcd's KV operations on the MVCC store, as etcd's applier defines them
// (server/etcdserver/apply.go, v3.4/v3.5): Range's sorting, filtering and
// limits; Put's ignore_value/ignore_lease/prev_kv; DeleteRange; Txn with its
// compares evaluated on the state before the txn (nested ones too), its
// pre-checks along the chosen path, and its response tree.
//
// Ops run against a KvState: a published read view (reads, read-only txns,
// any thread) or the apply thread's Writer (everything that writes), seen
// through a KeySpace that may give some keys a meaning of their own.
#pragma once

#include <cstdint>
#include <functional>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "mvcc/range.h"
#include "mvcc/store.h"
#include "mvcc/writer.h"

namespace etcdq::apply {

// How a key space with a meaning of its own (a key-space plug-in such as
// the work queues, apply/plugin_layer.h) plugs into the KV ops without them
// knowing it: every Range, txn compare, Put and DeleteRange, top-level or
// inside a Txn, passes its key through here. The base class gives every key its plain etcd
// meaning (plain_keys()).
//
// Thread-safety: read_range and delete_range are pure (any thread); put
// runs on the apply thread inside an open Writer txn.
class KeySpace {
 public:
  virtual ~KeySpace() = default;
  // The range that a Range, a compare or a watch on [key, end) reads.
  virtual void read_range(std::string* key, std::string* end) const;
  // The range that a DeleteRange of [key, end) removes.
  virtual void delete_range(std::string* key, std::string* end) const;
  // Applies a Put whose lease (if any) is known to exist. The base class
  // stores it as etcd does (put_plain); a key space may handle it itself.
  virtual Error put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, int64_t time_ms,
                    etcdserverpb::PutResponse* resp);
};

// The key space in which every key is a plain etcd key (stateless).
KeySpace& plain_keys();

// The store as one reader or writer sees it, through a key space.
class KvState {
 public:
  explicit KvState(KeySpace& keys) : keys_(&keys) {}
  virtual ~KvState() = default;
  // Range at the state's read revision (a txn's own writes included).
  virtual Error range(std::string_view key, std::string_view end, const mvcc::RangeOptions& o,
                      mvcc::RangeResult* out) const = 0;
  virtual int64_t read_revision() const = 0;
  virtual int64_t compact_revision() const = 0;
  virtual mvcc::Writer* writer() = 0;  // null: read-only
  KeySpace& keys() const { return *keys_; }

 private:
  KeySpace* keys_;
};

class ViewState final : public KvState {
 public:
  // `keys`: the member's key space (member/context.h), so that a read sees
  // what the same read inside a write txn sees.
  explicit ViewState(const mvcc::ReadView& v, KeySpace& keys = plain_keys()) : KvState(keys), v_(v) {}
  Error range(std::string_view key, std::string_view end, const mvcc::RangeOptions& o,
              mvcc::RangeResult* out) const override {
    return mvcc::range(v_, key, end, o, v_.revision(), v_.compact_revision(), out);
  }
  int64_t read_revision() const override { return v_.revision(); }
  int64_t compact_revision() const override { return v_.compact_revision(); }
  mvcc::Writer* writer() override { return nullptr; }

 private:
  const mvcc::ReadView& v_;
};

class WriterState final : public KvState {
 public:
  WriterState(mvcc::Writer* w, KeySpace& keys) : KvState(keys), w_(w) {}
  Error range(std::string_view key, std::string_view end, const mvcc::RangeOptions& o,
              mvcc::RangeResult* out) const override {
    return w_->range(key, end, o, out);
  }
  int64_t read_revision() const override { return w_->revision() + (w_->txn_changed() ? 1 : 0); }
  int64_t compact_revision() const override { return w_->compact_revision(); }
  mvcc::Writer* writer() override { return w_; }

 private:
  mvcc::Writer* w_;
};

// Whether a lease id is granted (the lessor's answer). Put with a lease that
// is not fails with errors::lease_not_found().
using LeaseExists = std::function<bool(int64_t lease_id)>;

// What a write needs besides the store and its key space.
struct Env {
  LeaseExists leases;
  int64_t time_ms = 0;  // the command's time (Command.time_ms)
};

// Header revisions are set as etcd's applier sets them; the server fills in
// cluster_id, member_id and raft_term.
Error range(const KvState& s, const etcdserverpb::RangeRequest& r, etcdserverpb::RangeResponse* resp);
// The caller brackets put/delete_range/txn with writer->begin() and end();
// `s` is a WriterState. put does not check the lease (the caller does, as
// etcd's applier does before Put and in a txn's pre-checks); the key space
// decides what the key means (KeySpace::put).
Error put(KvState& s, const etcdserverpb::PutRequest& r, const Env& env, etcdserverpb::PutResponse* resp);
// etcd's Put of a plain key: ignore_value, ignore_lease and prev_kv as
// etcd's applier handles them. Errors: key_not_found() when ignore_value
// or ignore_lease names a key that does not exist.
Error put_plain(mvcc::Writer& w, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp);
Error delete_range(KvState& s, const etcdserverpb::DeleteRangeRequest& r, etcdserverpb::DeleteRangeResponse* resp);
// For a read-only txn `s` may be a ViewState; otherwise a WriterState.
Error txn(KvState& s, const etcdserverpb::TxnRequest& r, const Env& env, etcdserverpb::TxnResponse* resp);

}  // namespace etcdq::apply
