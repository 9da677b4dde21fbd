#include "member/fsm.h"

#include <chrono>

namespace etcdq::member {

Error ApplierFsm::apply(uint64_t index, std::string_view entry, std::vector<consensus::Applied>* applied) {
  std::vector<apply::Result> results;
  Error e = applier_->apply(index, entry, &results);
  applied->reserve(applied->size() + results.size());
  for (auto& r : results) {
    consensus::Applied a;
    a.origin = r.origin;
    a.proposal_id = r.proposal_id;
    auto outcome = std::make_unique<CommandOutcome>();
    outcome->result = std::move(r);
    a.outcome = std::move(outcome);
    applied->push_back(std::move(a));
  }
  return e;
}

Error ApplierFsm::take_snapshot(consensus::SnapshotPoint* at) {
  // libraft may drop log entries up to here once the snapshot is stored:
  // the state database must be durable up to the applied index first.
  if (Error e = applier_->make_durable()) return e;
  if (checkpoints_ != nullptr) {
    if (Error e = checkpoints_->take(applier_->engine(), applier_->applied_index())) return e;
  }
  at->applied_index = applier_->applied_index();
  at->revision = applier_->revision();
  return {};
}

Error ApplierFsm::restore(const Fetch& fetch, bool* damaged) {
  return applier_->restore(
      [&](const apply::Applier::PairSink& sink) {
        return fetch([&](uint32_t space, std::string_view key, std::string_view value) -> Error {
          if (space >= static_cast<uint32_t>(storage::kCfCount)) {
            return errors::internal("bad column family in a snapshot");
          }
          return sink(static_cast<storage::Cf>(space), key, value);
        });
      },
      damaged);
}

void propose_command(consensus::Node& node, apply::Command cmd, CommandDone done) {
  node.propose(
      [&cmd](consensus::ProposalTag tag) {
        cmd.set_origin(tag.origin);
        cmd.set_proposal_id(tag.id);
        if (cmd.time_ms() == 0) {
          cmd.set_time_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
        }
        return cmd.SerializeAsString();
      },
      [done = std::move(done)](Error e, std::unique_ptr<consensus::Outcome> outcome) {
        apply::Result r;
        if (outcome) {
          r = std::move(static_cast<CommandOutcome&>(*outcome).result);
        } else {
          r.error = e;
        }
        done(std::move(r));
      });
}

}  // namespace etcdq::member
