// What the member's request paths need of consensus: the pipeline's
// propose (member/pipeline.h), the read path's barrier (member/reads.h) and
// this member's standing (term, leader, learner: headers and the gRPC
// rules). consensus::Node provides it (member/node_consensus.h); the unit tests
// of the pipeline and the read path (tests/unit/member_paths_test.cc)
// provide a fake, so those paths are tested without a log or a network.
//
// Thread-safety: every method from any thread. Callbacks may run on the
// calling thread or on consensus's own; they must not block.
#pragma once

#include <functional>

#include "apply/result.h"
#include "common/error.h"
#include "etcdq/command.pb.h"
#include "member/fsm.h"
#include "consensus/node.h"

namespace etcdq::member {

class Consensus {
 public:
  virtual ~Consensus() = default;

  // Replicates `cmd` and applies it on every member; `done` runs exactly
  // once with the apply result, or an error that says why it was not
  // applied (errors::stopped(), errors::no_leader(), errors::timeout(), ...).
  // The command has passed the pipeline's checks.
  virtual void propose(apply::Command cmd, CommandDone done) = 0;
  // Runs `fn` once a linearizable read may be served from the applied
  // state (leadership confirmed, everything committed before the call
  // applied), or with the error that prevents it.
  virtual void read_barrier(std::function<void(Error)> fn) = 0;
  // Term, leader, indexes and whether this member is a learner, now.
  virtual consensus::Progress progress() = 0;
};

}  // namespace etcdq::member
