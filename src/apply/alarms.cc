#include "apply/alarms.h"

#include <string>

namespace etcdq::apply {
namespace {

constexpr std::string_view kPrefix = "alarm/";

std::string alarm_key(uint64_t member, int type) {
  std::string k(kPrefix);
  for (int i = 7; i >= 0; --i) k.push_back(static_cast<char>((member >> (8 * i)) & 0xff));
  k.push_back(static_cast<char>(type));
  return k;
}

etcdserverpb::AlarmMember member_of(uint64_t member, int type) {
  etcdserverpb::AlarmMember m;
  m.set_memberid(member);
  m.set_alarm(static_cast<etcdserverpb::AlarmType>(type));
  return m;
}

}  // namespace

Alarms::Alarms(storage::Engine* engine) : engine_(engine) { reload(); }

void Alarms::reload() {
  std::set<std::pair<uint64_t, int>> loaded;
  storage::Iterator it = engine_->iterator(storage::Cf::kMeta);
  std::string prefix(kPrefix);
  for (it.seek(prefix); it.valid() && it.key().starts_with(prefix); it.next()) {
    if (it.key().size() != prefix.size() + 9) continue;
    uint64_t member = 0;
    for (size_t i = 0; i < 8; ++i) member = (member << 8) | static_cast<uint8_t>(it.key()[prefix.size() + i]);
    loaded.emplace(member, static_cast<uint8_t>(it.key()[prefix.size() + 8]));
  }
  std::lock_guard<std::mutex> lock(mu_);
  set_ = std::move(loaded);
}

std::vector<etcdserverpb::AlarmMember> Alarms::activate(mvcc::Writer& w, uint64_t member,
                                                        etcdserverpb::AlarmType type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (set_.emplace(member, type).second) w.put_meta(alarm_key(member, type), "");
  return {member_of(member, type)};
}

std::vector<etcdserverpb::AlarmMember> Alarms::deactivate(mvcc::Writer& w, uint64_t member,
                                                          etcdserverpb::AlarmType type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (set_.erase({member, type}) == 0) return {};
  w.delete_meta(alarm_key(member, type));
  return {member_of(member, type)};
}

std::vector<etcdserverpb::AlarmMember> Alarms::list(uint64_t member, etcdserverpb::AlarmType type) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<etcdserverpb::AlarmMember> out;
  for (const auto& [m, t] : set_) {
    if ((member == 0 || m == member) && (type == etcdserverpb::NONE || t == type)) out.push_back(member_of(m, t));
  }
  return out;
}

bool Alarms::active(etcdserverpb::AlarmType type) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [m, t] : set_) {
    if (t == type) return true;
  }
  return false;
}

}  // namespace etcdq::apply
