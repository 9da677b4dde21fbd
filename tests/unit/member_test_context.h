// A member::Context over a real state machine (apply/state_machine.h) and a
// consensus of the test's own, for the unit tests of member's calls and
// paths: what a Member wires for its servers, without a node.
#pragma once

#include <cstdint>

#include "apply/state_machine.h"
#include "member/consensus.h"
#include "member/context.h"

namespace etcdq::testing_member {

inline void wire_context(member::Context* ctx, apply::StateMachine* sm, member::Consensus* consensus,
                         uint64_t member_id = 0x51, uint64_t cluster_id = 0xc1) {
  ctx->node = nullptr;
  ctx->consensus = consensus;
  ctx->store = sm->store();
  ctx->lessor = sm->lessor();
  ctx->alarms = sm->alarms();
  ctx->members = sm->members();
  ctx->auth = sm->auth();
  ctx->keys = &sm->applier()->keys();
  ctx->self.id = member_id;
  ctx->cluster_id = cluster_id;
}

}  // namespace etcdq::testing_member
