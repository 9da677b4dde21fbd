// What applying one command gives the member that proposed it.
#pragma once

#include <cstdint>
#include <variant>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"

namespace etcdq::apply {

// The outcome of one command, for whoever proposed it.
struct Result {
  uint64_t origin = 0;
  uint64_t proposal_id = 0;
  Error error;  // the client's error (etcd's code and message); state unchanged
  std::variant<std::monostate, etcdserverpb::PutResponse, etcdserverpb::DeleteRangeResponse,
               etcdserverpb::TxnResponse, etcdserverpb::CompactionResponse, etcdserverpb::LeaseGrantResponse,
               etcdserverpb::LeaseRevokeResponse, etcdserverpb::AlarmResponse>
      response;
  // Compact(physical=true): answer once physical compaction reached this.
  int64_t wait_compaction = 0;
};

}  // namespace etcdq::apply
