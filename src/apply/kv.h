// etcd's KV operations on the MVCC store, as etcd's applier defines them
// (server/etcdserver/apply.go, v3.4/v3.5): Range's sorting, filtering and
// limits; Put's ignore_value/ignore_lease/prev_kv; DeleteRange; Txn with its
// compares evaluated on the state before the txn (nested ones too), its
// pre-checks along the chosen path, and its response tree.
//
// Ops run against a KvState: a published read view (reads, read-only txns,
// any thread) or the apply thread's Writer (everything that writes).
#pragma once

#include <cstdint>
#include <functional>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "mvcc/range.h"
#include "mvcc/store.h"
#include "mvcc/writer.h"
#include "queue/book.h"

namespace etcdq::apply {

class KvState {
 public:
  virtual ~KvState() = default;
  // Range at the state's read revision (a txn's own writes included).
  virtual Error range(std::string_view key, std::string_view end, const mvcc::RangeOptions& o,
                      mvcc::RangeResult* out) const = 0;
  virtual int64_t read_revision() const = 0;
  virtual int64_t compact_revision() const = 0;
  virtual mvcc::Writer* writer() = 0;  // null: read-only
};

class ViewState final : public KvState {
 public:
  explicit ViewState(const mvcc::ReadView& v) : v_(v) {}
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
  explicit WriterState(mvcc::Writer* w) : w_(w) {}
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

// What a write needs besides the store. Queue keys (queue/keys.h) take
// their meaning from `queues`: a Put to /q/{queue}/p/{tail} produces, a
// Put to /q/{queue}/config sets the queue's settings, and a Delete of a
// consumer-scoped or /queue/ message key acks the message at /q/.
struct Env {
  LeaseExists leases;
  queue::Book* queues = nullptr;  // null: queue keys are plain keys (read-only txns)
  int64_t time_ms = 0;            // the command's time (Command.time_ms)
};

// Header revisions are set as etcd's applier sets them; the server fills in
// cluster_id, member_id and raft_term.
Error range(const KvState& s, const etcdserverpb::RangeRequest& r, etcdserverpb::RangeResponse* resp);
// The caller brackets put/delete_range/txn with writer->begin() and end().
Error put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, const Env& env, etcdserverpb::PutResponse* resp);
Error delete_range(mvcc::Writer& w, const etcdserverpb::DeleteRangeRequest& r,
                   etcdserverpb::DeleteRangeResponse* resp);
// For a read-only txn `s` may be a ViewState; otherwise a WriterState.
Error txn(KvState& s, const etcdserverpb::TxnRequest& r, const Env& env, etcdserverpb::TxnResponse* resp);

}  // namespace etcdq::apply
