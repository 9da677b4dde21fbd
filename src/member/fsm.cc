#include "member/fsm.h"

#include <chrono>

#include "mvcc/codec.h"
#include "storage/snapshot.h"

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
  // the state database must be durable up to the applied index first
  // (apply's writes skip RocksDB's WAL: make_durable flushes the memtables,
  // which at a snapshot every --snapshot-count requests hold that many).
  // Nothing else to keep: an installer streams the live state
  // (stream_state), which is at this index or later.
  if (Error e = applier_->make_durable()) return e;
  at->applied_index = applier_->applied_index();
  at->revision = applier_->revision();
  return {};
}

namespace {
// apply::Applier's staged state as consensus holds it.
class StagedPairs final : public consensus::Fsm::Staged {
 public:
  explicit StagedPairs(std::unique_ptr<apply::Applier::Staged> s) : staged(std::move(s)) {}
  uint64_t applied_index() const override { return staged->applied_index(); }
  std::unique_ptr<apply::Applier::Staged> staged;
};
}  // namespace

Error ApplierFsm::stage(const Fetch& fetch, std::unique_ptr<Staged>* out) {
  std::unique_ptr<apply::Applier::Staged> staged;
  Error e = applier_->stage(
      [&](const apply::Applier::PairSink& sink) {
        return fetch([&](uint32_t space, std::string_view key, std::string_view value) -> Error {
          if (space >= static_cast<uint32_t>(storage::kCfCount)) {
            return errors::internal("bad column family in a snapshot");
          }
          return sink(static_cast<storage::Cf>(space), key, value);
        });
      },
      &staged);
  if (e) return e;
  *out = std::make_unique<StagedPairs>(std::move(staged));
  return {};
}

Error ApplierFsm::restore_staged(Staged& staged, bool* damaged) {
  return applier_->restore_staged(*static_cast<StagedPairs&>(staged).staged, damaged);
}

Error stream_state(const storage::Engine* engine, uint64_t min_index, const StateVisitor& fn, StateParts parts) {
  storage::Snapshot snap(engine);
  std::string applied;
  uint64_t at = 0;
  if (snap.get(storage::Cf::kMeta, mvcc::kMetaAppliedIndex, &applied)) {
    at = static_cast<uint64_t>(mvcc::decode_i64(applied));
  }
  if (at < min_index) {
    return errors::internal("the state here is at index " + std::to_string(at) + ", below " +
                            std::to_string(min_index));
  }
  for (int c = 0; c < storage::kCfCount; ++c) {
    const auto cf = static_cast<storage::Cf>(c);
    if (parts == StateParts::kAllButLatest && cf == storage::Cf::kLatest) continue;
    // One pass over everything: bulk reads keep the block cache for clients.
    storage::Iterator it = snap.bulk_iterator(static_cast<storage::Cf>(c));
    for (it.seek_to_first(); it.valid(); it.next()) {
      if (Error e = fn(static_cast<storage::Cf>(c), it.key(), it.value())) return e;
    }
    if (it.failed()) return errors::internal("reading the state: " + it.error_text());
  }
  return {};
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
