// Alarms, as etcd's alarm store (server/etcdserver/api/v3alarm) keeps them:
// a set of (member id, alarm type), replicated through the log and stored
// in the state database ("alarm/" in the meta column family). While NOSPACE
// is raised, writes that add data fail with errors::no_space() (etcd's
// applierV3Capped: Put, Txn with writes, LeaseGrant); while CORRUPT is
// raised, every KV and lease operation fails with errors::corrupt().
//
// Thread-safety: changed by the apply thread, read from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "mvcc/writer.h"
#include "storage/engine.h"

namespace etcdq::apply {

class Alarms {
 public:
  explicit Alarms(storage::Engine* engine);  // loads the stored set
  // Reloads the set (a snapshot restore replaced the database).
  void reload();

  // Apply thread. Returns the alarm that is now active (activate) or was
  // removed (deactivate), as etcd answers.
  std::vector<etcdserverpb::AlarmMember> activate(mvcc::Writer& w, uint64_t member, etcdserverpb::AlarmType type);
  std::vector<etcdserverpb::AlarmMember> deactivate(mvcc::Writer& w, uint64_t member,
                                                    etcdserverpb::AlarmType type);

  // Every active alarm (member 0 and type NONE: all), for Alarm GET.
  std::vector<etcdserverpb::AlarmMember> list(uint64_t member, etcdserverpb::AlarmType type) const;
  bool active(etcdserverpb::AlarmType type) const;

 private:
  storage::Engine* engine_;
  mutable std::mutex mu_;
  std::set<std::pair<uint64_t, int>> set_;
};

}  // namespace etcdq::apply
