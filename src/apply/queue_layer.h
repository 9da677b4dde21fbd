// The queue layer of the apply chain (chain.h): how the work queues of
// QUEUES.md plug into apply, so that the KV ops (kv.h) and the backend
// (backend.h) know nothing of them. Keys under /q/ and /queue/ take their
// meaning from QueueKeys, a key space (kv.h), wherever a KV op meets them,
// top-level or inside a Txn:
//
//   Put    /q/{queue}/p/{tail}   produces: queue::Book stores the message
//                                at its next idx (no plain key is written);
//   Put    /q/{queue}/config     sets the queue's settings, and is stored
//                                as a plain key at /q/ whatever the prefix;
//   Delete (and Range, compares, watches) of /queue/ keys name the /q/
//                                ones; a consumer-scoped ack names the
//                                message key (queue/keys.h).
//
// The layer itself applies QueueAssign (the leader's deliveries) and keeps
// the Book's records in step with the entry: a delete of any /q/ key
// (an ack, a lease expiry, a prefix delete) goes to the Book through the
// writer's delete tap, the queues' counters go into the entry's batch
// before it is written, and this member's deliveries go out after it is.
//
// Thread-safety: the layer belongs to the apply thread. QueueKeys'
// read_range and delete_range are pure and may be used by any thread (the
// member's readers do, through member/context.h).
#pragma once

#include "apply/chain.h"
#include "apply/kv.h"
#include "queue/book.h"

namespace etcdq::apply {

// Puts under /q/ or /queue/ (queue/keys.h), checked before they are
// proposed (validate_put): a produce with an empty queue or tail, any other
// key but a queue's config, or a config that is not valid
// (queue/config.h) fail with InvalidArgument. Pure; any thread.
Error validate_queue_put(const etcdserverpb::PutRequest& r);

class QueueKeys final : public KeySpace {
 public:
  explicit QueueKeys(queue::Book* book) : book_(book) {}
  void read_range(std::string* key, std::string* end) const override;
  void delete_range(std::string* key, std::string* end) const override;
  // Errors: key_not_found() for a produce with ignore_value or ignore_lease
  // (a new message has nothing to keep), as a plain Put of a missing key.
  Error put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, int64_t time_ms,
            etcdserverpb::PutResponse* resp) override;

 private:
  queue::Book* book_;
};

class QueueLayer final : public Forwarding {
 public:
  QueueLayer(queue::Book* book, Layer* next) : Forwarding(next), book_(book), keys_(book) {}
  std::string_view name() const override { return "queue"; }
  KeySpace& keys() { return keys_; }

  void begin_entry(mvcc::Writer& w) override;
  void before_commit(mvcc::Writer& w) override;
  void committed(int64_t revision) override;
  void restored() override;

  Error put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) override;
  Error delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                     etcdserverpb::DeleteRangeResponse* resp) override;
  Error txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) override;
  Error queue_assign(ApplyCtx& c, const QueueAssign& a) override;

 private:
  queue::Book* book_;
  QueueKeys keys_;
};

}  // namespace etcdq::apply
