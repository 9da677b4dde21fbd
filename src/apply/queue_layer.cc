#include "apply/queue_layer.h"

#include "queue/config.h"
#include "queue/keys.h"

namespace etcdq::apply {

Error validate_queue_put(const etcdserverpb::PutRequest& r) {
  if (!queue::in_queue_space(r.key())) return {};
  queue::Key k = queue::parse(r.key());
  switch (k.kind) {
    case queue::KeyKind::kProduce: return {};
    case queue::KeyKind::kConfig: {
      if (r.ignore_value()) return {};  // keeps the config it has
      queue::Config c;
      return queue::parse_config(r.value(), &c);
    }
    default:
      return {Code::kInvalidArgument,
              "etcdq: malformed queue key \"" + r.key() +
                  "\": produce with /q/{queue}/p/{tail} or set /q/{queue}/config (etcdq README, \"Work queues\")"};
  }
}

void QueueKeys::read_range(std::string* key, std::string* end) const { queue::canonicalize_read(key, end); }

void QueueKeys::delete_range(std::string* key, std::string* end) const { queue::canonicalize_delete(key, end); }

Error QueueKeys::put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, int64_t time_ms,
                     etcdserverpb::PutResponse* resp) {
  if (!queue::in_queue_space(r.key())) return put_plain(w, r, resp);
  queue::Key k = queue::parse(r.key());
  if (k.kind == queue::KeyKind::kProduce) {
    // A new message never exists yet: nothing to keep or return.
    if (r.ignore_value() || r.ignore_lease()) return errors::key_not_found();
    book_->produce(w, k.queue, k.tail, r.value(), r.lease(), time_ms);
    resp->mutable_header()->set_revision(w.revision() + 1);
    return {};
  }
  if (k.kind == queue::KeyKind::kConfig) {
    book_->config_put(w, k.queue, r.value());
    if (r.key() != queue::config_key(k.queue)) {  // /queue/{queue}/config: stored at /q/
      etcdserverpb::PutRequest at_q = r;
      at_q.set_key(queue::config_key(k.queue));
      return put_plain(w, at_q, resp);
    }
  }
  return put_plain(w, r, resp);
}

void QueueLayer::begin_entry(mvcc::Writer& w) {
  queue::Book* book = book_;
  w.set_delete_tap([book](mvcc::Writer& wr, std::string_view key) {
    if (key.starts_with("/q/")) book->deleted(wr, key);
  });
  next().begin_entry(w);
}

void QueueLayer::before_commit(mvcc::Writer& w) {
  book_->before_commit(w);
  next().before_commit(w);
}

void QueueLayer::committed(int64_t revision) {
  book_->committed(revision);
  next().committed(revision);
}

void QueueLayer::restored() {
  book_->reload();
  next().restored();
}

Error QueueLayer::put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) {
  c.keys = &keys_;
  return next().put(c, r, resp);
}

Error QueueLayer::delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                               etcdserverpb::DeleteRangeResponse* resp) {
  c.keys = &keys_;
  return next().delete_range(c, r, resp);
}

Error QueueLayer::txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) {
  c.keys = &keys_;
  return next().txn(c, r, resp);
}

Error QueueLayer::queue_assign(ApplyCtx& c, const QueueAssign& a) {
  book_->assign(c.w, a, c.cmd.time_ms());
  return {};
}

}  // namespace etcdq::apply
