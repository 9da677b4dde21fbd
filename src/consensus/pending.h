// Internal to consensus/: what callers' threads queue for the consensus thread
// to propose (consensus/node_impl.h): a proposal of this member's (`done` set),
// or commands a follower forwarded, framed already (`forwarded_done` set).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/error.h"
#include "consensus/node.h"

namespace etcdq::consensus {

struct Pending {
  uint64_t id = 0;
  std::string bytes;
  ProposalDone done;
  std::function<void(Error)> forwarded_done;
  bool framed = false;  // `bytes` carries its frame already
};

}  // namespace etcdq::consensus
