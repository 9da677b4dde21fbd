// What members publish about themselves (etcd's member attributes: name and
// client URLs, server/etcdserver/api/membership), replicated through the
// log and stored in the state database ("member/" in the meta column
// family). Which members exist, with their peer address and role, is
// libraft's configuration; this table only adds names and client URLs, and
// the cluster id that the first published attributes carried (members that
// join later take it from here).
//
// Thread-safety: changed by the apply thread (and a snapshot restore), read
// from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "etcdq/command.pb.h"
#include "mvcc/writer.h"
#include "storage/engine.h"

namespace etcdq::apply {

class Members {
 public:
  explicit Members(storage::Engine* engine);  // loads the stored table

  // Apply thread.
  void publish(mvcc::Writer& w, const MemberAttributes& a);
  // Reloads from the database (after a snapshot restore replaced it).
  void reload();

  std::optional<MemberAttributes> get(uint64_t id) const;
  std::map<uint64_t, MemberAttributes> all() const;
  // The cluster id of the first published attributes; 0 if none yet.
  uint64_t cluster_id() const;

 private:
  storage::Engine* engine_;
  mutable std::mutex mu_;
  std::map<uint64_t, MemberAttributes> by_id_;
  uint64_t cluster_id_ = 0;
};

}  // namespace etcdq::apply
