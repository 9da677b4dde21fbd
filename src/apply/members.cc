#include "apply/members.h"

#include <string>

#include "mvcc/codec.h"

namespace etcdq::apply {
namespace {

constexpr std::string_view kPrefix = "member/";
constexpr std::string_view kClusterKey = "cluster/id";

std::string member_key(uint64_t id) {
  std::string k(kPrefix);
  for (int i = 7; i >= 0; --i) k.push_back(static_cast<char>((id >> (8 * i)) & 0xff));
  return k;
}

}  // namespace

Members::Members(storage::Engine* engine) : engine_(engine) { reload(); }

void Members::reload() {
  std::map<uint64_t, MemberAttributes> table;
  uint64_t cluster = 0;
  storage::Iterator it = engine_->iterator(storage::Cf::kMeta);
  std::string prefix(kPrefix);
  for (it.seek(prefix); it.valid() && it.key().starts_with(prefix); it.next()) {
    MemberAttributes a;
    if (a.ParseFromArray(it.value().data(), static_cast<int>(it.value().size()))) table[a.id()] = a;
  }
  std::string v;
  if (engine_->get(storage::Cf::kMeta, kClusterKey, &v)) {
    cluster = static_cast<uint64_t>(mvcc::decode_i64(v));
  }
  std::lock_guard<std::mutex> lock(mu_);
  by_id_ = std::move(table);
  cluster_id_ = cluster;
}

void Members::publish(mvcc::Writer& w, const MemberAttributes& a) {
  std::lock_guard<std::mutex> lock(mu_);
  w.put_meta(member_key(a.id()), a.SerializeAsString());
  by_id_[a.id()] = a;
  if (cluster_id_ == 0 && a.cluster_id() != 0) {
    cluster_id_ = a.cluster_id();
    w.put_meta(kClusterKey, mvcc::encode_i64(static_cast<int64_t>(cluster_id_)));
  }
}

std::optional<MemberAttributes> Members::get(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

std::map<uint64_t, MemberAttributes> Members::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_;
}

uint64_t Members::cluster_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cluster_id_;
}

}  // namespace etcdq::apply
