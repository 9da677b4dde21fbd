#include "apply/validate.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "keyspace/registry.h"

namespace etcdq::apply {
namespace {

using etcdserverpb::RequestOp;

Error validate_ops_count(const etcdserverpb::TxnRequest& r, int64_t max_txn_ops);

Error validate_op(const RequestOp& op, int64_t max_txn_ops) {
  switch (op.request_case()) {
    case RequestOp::kRequestRange: return validate_range(op.request_range());
    case RequestOp::kRequestPut: return validate_put(op.request_put());
    case RequestOp::kRequestDeleteRange: return validate_delete_range(op.request_delete_range());
    case RequestOp::kRequestTxn: return validate_ops_count(op.request_txn(), max_txn_ops);
    default: return errors::key_not_found();  // an empty op: etcd's checkRequestOp says so
  }
}

Error validate_ops_count(const etcdserverpb::TxnRequest& r, int64_t max_txn_ops) {
  int64_t n = std::max({r.compare_size(), r.success_size(), r.failure_size()});
  if (n > max_txn_ops) return errors::too_many_ops();
  for (const auto& c : r.compare()) {
    if (c.key().empty()) return errors::empty_key();
  }
  // A nested txn gets what is left of the budget, as in etcd.
  for (const auto& op : r.success()) {
    if (Error e = validate_op(op, max_txn_ops - n)) return e;
  }
  for (const auto& op : r.failure()) {
    if (Error e = validate_op(op, max_txn_ops - n)) return e;
  }
  return {};
}

// Deleted ranges of one branch, as [begin, end) intervals; a single key k is
// [k, k+"\0"), and a from-key range ("\0" end) runs to the end of keyspace.
struct Intervals {
  std::vector<std::pair<std::string, std::string>> items;  // end "" = unbounded
  void add_delete(const etcdserverpb::DeleteRangeRequest& d) {
    if (d.range_end().empty()) {
      items.emplace_back(d.key(), d.key() + std::string(1, '\0'));
    } else if (d.range_end() == std::string(1, '\0')) {
      items.emplace_back(d.key(), "");
    } else {
      items.emplace_back(d.key(), d.range_end());
    }
  }
  bool contains(const std::string& k) const {
    for (const auto& [b, e] : items) {
      if (k >= b && (e.empty() || k < e)) return true;
    }
    return false;
  }
  void merge(const Intervals& o) { items.insert(items.end(), o.items.begin(), o.items.end()); }
};

// etcd's checkIntervals: within the ops that may run together, no key may be
// put twice, nor put and deleted. The two branches of a nested txn exclude
// each other, so a key put in both is fine.
Error check_intervals(const google::protobuf::RepeatedPtrField<RequestOp>& ops,
                      std::set<std::string>* puts_out, Intervals* dels_out) {
  Intervals dels;
  for (const auto& op : ops) {
    if (op.has_request_delete_range()) dels.add_delete(op.request_delete_range());
  }
  std::set<std::string> puts;
  for (const auto& op : ops) {
    if (!op.has_request_txn()) continue;
    std::set<std::string> then_puts, else_puts;
    Intervals then_dels, else_dels;
    if (Error e = check_intervals(op.request_txn().success(), &then_puts, &then_dels)) return e;
    if (Error e = check_intervals(op.request_txn().failure(), &else_puts, &else_dels)) return e;
    for (const auto& k : then_puts) {
      if (puts.count(k) || dels.contains(k)) return errors::duplicate_key();
      puts.insert(k);
    }
    for (const auto& k : else_puts) {
      if ((puts.count(k) && !then_puts.count(k)) || dels.contains(k)) return errors::duplicate_key();
      puts.insert(k);
    }
    dels.merge(then_dels);
    dels.merge(else_dels);
  }
  for (const auto& op : ops) {
    if (!op.has_request_put()) continue;
    const std::string& k = op.request_put().key();
    if (puts.count(k) || dels.contains(k)) return errors::duplicate_key();
    puts.insert(k);
  }
  if (puts_out) *puts_out = std::move(puts);
  if (dels_out) *dels_out = std::move(dels);
  return {};
}

bool ops_read_only(const google::protobuf::RepeatedPtrField<RequestOp>& ops) {
  for (const auto& op : ops) {
    switch (op.request_case()) {
      case RequestOp::kRequestPut:
      case RequestOp::kRequestDeleteRange: return false;
      case RequestOp::kRequestTxn:
        if (!txn_is_read_only(op.request_txn())) return false;
        break;
      default: break;
    }
  }
  return true;
}

}  // namespace

Error validate_range(const etcdserverpb::RangeRequest& r) {
  if (r.key().empty()) return errors::empty_key();
  return {};
}

Error validate_put(const etcdserverpb::PutRequest& r) {
  if (r.key().empty()) return errors::empty_key();
  if (r.ignore_value() && !r.value().empty()) return errors::value_provided();
  if (r.ignore_lease() && r.lease() != 0) return errors::lease_provided();
  return keyspace::validate_put(r);
}

Error validate_delete_range(const etcdserverpb::DeleteRangeRequest& r) {
  if (r.key().empty()) return errors::empty_key();
  return {};
}

Error validate_txn(const etcdserverpb::TxnRequest& r, int64_t max_txn_ops) {
  if (Error e = validate_ops_count(r, max_txn_ops)) return e;
  // Overlaps after the cheap checks (etcd does the same, to bound the work);
  // check_intervals recurses into nested txns itself.
  if (Error e = check_intervals(r.success(), nullptr, nullptr)) return e;
  return check_intervals(r.failure(), nullptr, nullptr);
}

bool txn_is_read_only(const etcdserverpb::TxnRequest& r) {
  return ops_read_only(r.success()) && ops_read_only(r.failure());
}

namespace {
bool ops_have_put(const google::protobuf::RepeatedPtrField<etcdserverpb::RequestOp>& ops) {
  for (const auto& op : ops) {
    if (op.has_request_put()) return true;
    if (op.has_request_txn() && txn_has_put(op.request_txn())) return true;
  }
  return false;
}
}  // namespace

bool txn_has_put(const etcdserverpb::TxnRequest& r) { return ops_have_put(r.success()) || ops_have_put(r.failure()); }

}  // namespace etcdq::apply
