#include "apply/kv.h"

#include <algorithm>
#include <vector>

#include "apply/validate.h"
#include "mvcc/metrics.h"

namespace etcdq::apply {
namespace {

using etcdserverpb::Compare;
using etcdserverpb::RangeRequest;
using etcdserverpb::RequestOp;
using etcdserverpb::ResponseOp;
using etcdserverpb::TxnRequest;
using etcdserverpb::TxnResponse;
using mvccpb::KeyValue;

int compare_i64(int64_t a, int64_t b) { return a < b ? -1 : (a > b ? 1 : 0); }

// etcd's compareKV: the operand comes from the matching oneof member, or is
// zero/empty when the client set another one.
bool compare_kv(const Compare& c, const KeyValue& kv) {
  int result = 0;
  switch (c.target()) {
    case Compare::VALUE: {
      const std::string& v = c.target_union_case() == Compare::kValue ? c.value() : std::string();
      int r = kv.value().compare(v);
      result = r < 0 ? -1 : (r > 0 ? 1 : 0);
      break;
    }
    case Compare::CREATE:
      result = compare_i64(kv.create_revision(),
                           c.target_union_case() == Compare::kCreateRevision ? c.create_revision() : 0);
      break;
    case Compare::MOD:
      result = compare_i64(kv.mod_revision(),
                           c.target_union_case() == Compare::kModRevision ? c.mod_revision() : 0);
      break;
    case Compare::VERSION:
      result = compare_i64(kv.version(), c.target_union_case() == Compare::kVersion ? c.version() : 0);
      break;
    case Compare::LEASE:
      result = compare_i64(kv.lease(), c.target_union_case() == Compare::kLease ? c.lease() : 0);
      break;
    default: break;
  }
  switch (c.result()) {
    case Compare::EQUAL: return result == 0;
    case Compare::NOT_EQUAL: return result != 0;
    case Compare::GREATER: return result > 0;
    case Compare::LESS: return result < 0;
    default: return true;
  }
}

// A missing key compares as a zero KeyValue, except on VALUE, which fails:
// "" cannot be told apart from absent on the wire (etcd's applyCompare).
bool apply_compare(const KvState& s, const Compare& c) {
  std::string key = c.key(), end = c.range_end();
  s.keys().read_range(&key, &end);  // what Range of the same key sees
  mvcc::RangeResult rr;
  if (s.range(key, end, {}, &rr)) return false;
  if (rr.kvs.empty()) {
    if (c.target() == Compare::VALUE) return false;
    return compare_kv(c, KeyValue());
  }
  for (const auto& kv : rr.kvs) {
    if (!compare_kv(c, kv)) return false;
  }
  return true;
}

const google::protobuf::RepeatedPtrField<RequestOp>& branch(const TxnRequest& t, bool ok) {
  return ok ? t.success() : t.failure();
}

// Every compare of the txn and of the nested txns on the chosen branches,
// evaluated up front on the state before the txn, depth-first; each txn's
// compares stop at the first false one, as etcd's applyCompares. `compares`
// counts those evaluated (each one range read).
void compare_to_path(const KvState& s, const TxnRequest& t, std::vector<bool>* path, int* compares) {
  bool ok = std::all_of(t.compare().begin(), t.compare().end(), [&](const Compare& c) {
    ++*compares;
    return apply_compare(s, c);
  });
  path->push_back(ok);
  for (const auto& op : branch(t, ok)) {
    if (op.has_request_txn()) compare_to_path(s, op.request_txn(), path, compares);
  }
}

// The ranges, puts and deletes the path runs, nested txns' included.
int ops_on_path(const TxnRequest& t, const std::vector<bool>& path, size_t* pos) {
  int n = 0;
  for (const auto& op : branch(t, path[(*pos)++])) {
    if (op.has_request_txn()) {
      n += ops_on_path(op.request_txn(), path, pos);
    } else if (op.has_request_range() || op.has_request_put() || op.has_request_delete_range()) {
      ++n;
    }
  }
  return n;
}

Error check_put(const KvState& s, const etcdserverpb::PutRequest& p, const LeaseExists& leases) {
  if (p.ignore_value() || p.ignore_lease()) {
    mvcc::RangeResult rr;
    if (Error e = s.range(p.key(), "", {}, &rr)) return e;
    if (rr.kvs.empty()) return errors::key_not_found();
  }
  if (p.lease() != 0 && !leases(p.lease())) return errors::lease_not_found();
  return {};
}

// etcd's checkRequestRange: any revision but 0 is compared with the
// compaction watermark, which is -1 before the first compaction. So a
// negative revision in a txn is "compacted" (-1 passes on a never-compacted
// store and then reads the latest), unlike a plain Range, where any
// revision <= 0 reads the latest (mvcc/range.h).
Error check_range(const KvState& s, const RangeRequest& r) {
  if (r.revision() > s.read_revision()) return errors::future_rev();
  if (r.revision() != 0 && r.revision() < s.compact_revision()) return errors::compacted();
  return {};
}

// etcd's checkRequests: the ops that will run, on the state before the txn.
Error check_path(const KvState& s, const TxnRequest& t, const std::vector<bool>& path, size_t* pos,
                 bool writes, const LeaseExists& leases) {
  bool ok = path[(*pos)++];
  for (const auto& op : branch(t, ok)) {
    Error e;
    if (op.has_request_put() && writes) e = check_put(s, op.request_put(), leases);
    if (op.has_request_range()) e = check_range(s, op.request_range());
    if (op.has_request_txn()) e = check_path(s, op.request_txn(), path, pos, writes, leases);
    if (e) return e;
  }
  return {};
}

void run_path(KvState& s, const TxnRequest& t, const std::vector<bool>& path, size_t* pos, const Env& env,
              TxnResponse* resp) {
  bool ok = path[(*pos)++];
  resp->set_succeeded(ok);
  resp->mutable_header();  // etcd gives nested txns an empty header
  for (const auto& op : branch(t, ok)) {
    ResponseOp* out = resp->add_responses();
    switch (op.request_case()) {
      case RequestOp::kRequestRange:
        range(s, op.request_range(), out->mutable_response_range());
        break;
      case RequestOp::kRequestPut:
        put(s, op.request_put(), env, out->mutable_response_put());
        break;
      case RequestOp::kRequestDeleteRange:
        delete_range(s, op.request_delete_range(), out->mutable_response_delete_range());
        break;
      case RequestOp::kRequestTxn:
        run_path(s, op.request_txn(), path, pos, env, out->mutable_response_txn());
        break;
      default: break;
    }
  }
}

template <typename Less>
void sort_kvs(std::vector<KeyValue>* kvs, bool descend, Less less) {
  // Stable, so equal targets keep key order, as etcd's sort does for the
  // small result sets clients sort.
  if (descend) {
    std::stable_sort(kvs->begin(), kvs->end(), [&](const KeyValue& a, const KeyValue& b) { return less(b, a); });
  } else {
    std::stable_sort(kvs->begin(), kvs->end(), less);
  }
}

}  // namespace

Error range(const KvState& s, const RangeRequest& r, etcdserverpb::RangeResponse* resp) {
  bool fetch_all = r.sort_order() != RangeRequest::NONE || r.min_mod_revision() != 0 ||
                   r.max_mod_revision() != 0 || r.min_create_revision() != 0 ||
                   r.max_create_revision() != 0;
  mvcc::RangeOptions o;
  o.rev = r.revision();
  o.count_only = r.count_only();
  // One extra key tells whether there are `more`.
  if (!fetch_all && r.limit() > 0) o.limit = r.limit() + 1;
  std::string key = r.key(), end = r.range_end();
  s.keys().read_range(&key, &end);
  mvcc::RangeResult rr;
  if (Error e = s.range(key, end, o, &rr)) return e;

  auto& kvs = rr.kvs;
  auto prune = [&](auto drop) { kvs.erase(std::remove_if(kvs.begin(), kvs.end(), drop), kvs.end()); };
  if (r.max_mod_revision() != 0) prune([&](const KeyValue& kv) { return kv.mod_revision() > r.max_mod_revision(); });
  if (r.min_mod_revision() != 0) prune([&](const KeyValue& kv) { return kv.mod_revision() < r.min_mod_revision(); });
  if (r.max_create_revision() != 0)
    prune([&](const KeyValue& kv) { return kv.create_revision() > r.max_create_revision(); });
  if (r.min_create_revision() != 0)
    prune([&](const KeyValue& kv) { return kv.create_revision() < r.min_create_revision(); });

  auto order = r.sort_order();
  // Keys come back in key order; any other target sorts ascending by default.
  if (r.sort_target() != RangeRequest::KEY && order == RangeRequest::NONE) order = RangeRequest::ASCEND;
  if (order != RangeRequest::NONE) {
    bool desc = order == RangeRequest::DESCEND;
    switch (r.sort_target()) {
      case RangeRequest::KEY:
        sort_kvs(&kvs, desc, [](const KeyValue& a, const KeyValue& b) { return a.key() < b.key(); });
        break;
      case RangeRequest::VERSION:
        sort_kvs(&kvs, desc, [](const KeyValue& a, const KeyValue& b) { return a.version() < b.version(); });
        break;
      case RangeRequest::CREATE:
        sort_kvs(&kvs, desc,
                 [](const KeyValue& a, const KeyValue& b) { return a.create_revision() < b.create_revision(); });
        break;
      case RangeRequest::MOD:
        sort_kvs(&kvs, desc,
                 [](const KeyValue& a, const KeyValue& b) { return a.mod_revision() < b.mod_revision(); });
        break;
      case RangeRequest::VALUE:
        sort_kvs(&kvs, desc, [](const KeyValue& a, const KeyValue& b) { return a.value() < b.value(); });
        break;
      default: break;
    }
  }
  if (r.limit() > 0 && static_cast<int64_t>(kvs.size()) > r.limit()) {
    kvs.resize(r.limit());
    resp->set_more(true);
  }
  resp->mutable_header()->set_revision(rr.rev);
  resp->set_count(rr.count);
  resp->mutable_kvs()->Reserve(static_cast<int>(kvs.size()));
  for (auto& kv : kvs) {
    if (r.keys_only()) kv.clear_value();
    *resp->add_kvs() = std::move(kv);
  }
  return {};
}

void KeySpace::read_range(std::string*, std::string*) const {}

void KeySpace::delete_range(std::string*, std::string*) const {}

Error KeySpace::put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, int64_t, etcdserverpb::PutResponse* resp) {
  return put_plain(w, r, resp);
}

KeySpace& plain_keys() {
  static KeySpace plain;
  return plain;
}

Error put(KvState& s, const etcdserverpb::PutRequest& r, const Env& env, etcdserverpb::PutResponse* resp) {
  return s.keys().put(*s.writer(), r, env.time_ms, resp);
}

Error put_plain(mvcc::Writer& w, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) {
  std::string value = r.value();
  int64_t lease = r.lease();
  if (r.ignore_value() || r.ignore_lease() || r.prev_kv()) {
    KeyValue prev;
    bool existed = w.get_latest(r.key(), &prev);
    if ((r.ignore_value() || r.ignore_lease()) && !existed) return errors::key_not_found();
    if (r.ignore_value()) value = prev.value();
    if (r.ignore_lease()) lease = prev.lease();
    if (r.prev_kv() && existed) *resp->mutable_prev_kv() = std::move(prev);
  }
  w.put(r.key(), value, lease, nullptr);
  resp->mutable_header()->set_revision(w.revision() + 1);
  return {};
}

Error delete_range(KvState& s, const etcdserverpb::DeleteRangeRequest& r, etcdserverpb::DeleteRangeResponse* resp) {
  mvcc::Writer& w = *s.writer();
  std::string key = r.key(), end = r.range_end();
  s.keys().delete_range(&key, &end);
  std::vector<KeyValue> prev;
  int64_t n = w.delete_range(key, end, r.prev_kv() ? &prev : nullptr);
  resp->set_deleted(n);
  for (auto& kv : prev) *resp->add_prev_kvs() = std::move(kv);
  resp->mutable_header()->set_revision(w.revision() + (w.txn_changed() ? 1 : 0));
  return {};
}

Error txn(KvState& s, const TxnRequest& r, const Env& env, TxnResponse* resp) {
  std::vector<bool> path;
  int compares = 0;
  compare_to_path(s, r, &path, &compares);
  bool writes = !txn_is_read_only(r);
  size_t pos = 0;
  int ops = ops_on_path(r, path, &pos);
  // etcd 3.6 counts each mvcc txn of more than one operation (mvcc/metrics.h):
  // a txn that writes evaluates its compares in a read txn and runs its ops
  // in a write txn, two counts; a read-only txn does both in one.
  int txns = writes ? (compares > 1) + (ops > 1) : (compares + ops > 1);
  if (txns > 0) mvcc::mvcc_metrics().txn.Increment(txns);
  pos = 0;
  if (Error e = check_path(s, r, path, &pos, writes, env.leases)) return e;
  pos = 0;
  run_path(s, r, path, &pos, env, resp);
  resp->mutable_header()->set_revision(s.read_revision());
  return {};
}

}  // namespace etcdq::apply
