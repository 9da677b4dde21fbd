// Member and cluster ids, derived as etcd derives them
// (server/etcdserver/api/membership/member.go computeMemberID, cluster.go):
//   initial member id = first 8 bytes (big-endian) of SHA-1(sorted peer URLs
//                joined + cluster token): every member of --initial-cluster
//                computes the same ids from the same flags;
//   runtime member id = the same hash over the sorted peer URLs joined and
//                the time (MemberAdd; etcd: no token, the Unix time), so a
//                member added again at a removed member's URL gets a new id;
//   cluster id = first 8 bytes of SHA-1(sorted member ids, 8 bytes each BE)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "storage/engine.h"

namespace etcdq::member {

uint64_t member_id(std::vector<std::string> peer_urls, const std::string& cluster_token);
// The id of a member added at run time (MemberAdd), `unix_ns` nanoseconds
// after the Unix epoch. etcd hashes the Unix time in seconds and refuses
// an id it removed ("membership: ID removed", answered as member not
// found) when a member comes back within that second; etcdq keeps no list
// of removed ids, so it hashes nanoseconds: the same URL added again gets
// a new id whenever it is added.
uint64_t runtime_member_id(std::vector<std::string> peer_urls, int64_t unix_ns);
uint64_t cluster_id(std::vector<uint64_t> member_ids);

// The ids a data dir was created with. A member keeps them for life, as
// etcd does, even when it restarts with other peer URLs: the ids in the
// Raft log must not change. On a new data dir, stores `member` and
// `cluster`; otherwise replaces them with the stored ones (returns true
// if they differed). A new data dir also stores `token`
// (--initial-cluster-token).
bool keep_identity(storage::Engine* engine, uint64_t* member, uint64_t* cluster, const std::string& token);

// The --initial-cluster-token the data dir was created with (restored ones
// too), if it stored one: etcd ignores the flag once a data dir exists, and
// the other members' ids in the Raft configuration derive from it.
bool stored_cluster_token(storage::Engine* engine, std::string* token);

// Whether the data dir holds a member id (keep_identity stored one).
bool stored_member_id(storage::Engine* engine);

struct MemberInfo {
  uint64_t id = 0;
  std::string name;
  std::vector<std::string> peer_urls;
  std::vector<std::string> client_urls;
};

}  // namespace etcdq::member
