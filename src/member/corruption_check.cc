#include "member/corruption_check.h"

#include <spdlog/spdlog.h>

#include "common/thread_name.h"

namespace etcdq::member {
namespace {

std::string hex(uint64_t id) { return fmt::format("{:x}", id); }

Error malformed(const std::string& why) { return Error(Code::kInvalidArgument, "malformed hash answer: " + why); }

}  // namespace

Error check_peer_answer(uint64_t expected_id, uint64_t cluster_id, int64_t asked, const peer::HashKVResponse& r) {
  if (r.member_id() != expected_id) {
    return malformed("answered by member " + hex(r.member_id()) + ", asked " + hex(expected_id));
  }
  if (r.cluster_id() != cluster_id) return malformed("from cluster " + hex(r.cluster_id()));
  if (r.hash_revision() != asked) {
    return malformed("hashed revision " + std::to_string(r.hash_revision()) + ", asked " + std::to_string(asked));
  }
  // -1: never compacted (etcd's compactMainRev starts there).
  if (r.compact_revision() < -1 || r.compact_revision() >= asked || r.revision() < asked) {
    return malformed("revisions do not add up (compact " + std::to_string(r.compact_revision()) + ", hashed " +
                     std::to_string(asked) + ", current " + std::to_string(r.revision()) + ")");
  }
  return {};
}

bool is_future_rev(const Error& e) { return e && e.message() == errors::future_rev().message(); }
bool is_compacted(const Error& e) { return e && e.message() == errors::compacted().message(); }
bool is_cluster_mismatch(const Error& e) { return e && e.message() == kClusterIdMismatch; }

InitialVerdict initial_verdict(const KvHash& local, const PeerHash& peer) {
  if (peer.ok) {
    if (peer.hash.hash == local.hash) return InitialVerdict::kMatch;
    return peer.hash.compact_revision == local.compact_revision ? InitialVerdict::kMismatch
                                                                : InitialVerdict::kCompactDiffers;
  }
  if (is_future_rev(peer.error)) return InitialVerdict::kPeerBehind;
  if (is_compacted(peer.error)) return InitialVerdict::kLocalBehind;
  if (is_cluster_mismatch(peer.error)) return InitialVerdict::kClusterMismatch;
  return InitialVerdict::kNoAnswer;
}

std::vector<uint64_t> periodic_verdicts(uint64_t self, const KvHash& h, const KvHash& h2, int64_t rev2,
                                        const std::vector<PeerHash>& peers, std::vector<std::string>* reasons) {
  std::vector<uint64_t> alarms;
  // etcd raises one alarm a pass (its `alarmed` flag); every violation is logged.
  auto mismatch = [&alarms](uint64_t id) {
    if (alarms.empty()) alarms.push_back(id);
  };
  if (h2.hash != h.hash && h2.revision == h.revision && h.compact_revision == h2.compact_revision) {
    reasons->push_back(fmt::format(
        "found hash mismatch (revision-1={}, compact-revision-1={}, hash-1={}, revision-2={}, "
        "compact-revision-2={}, hash-2={})",
        h.revision, h.compact_revision, h.hash, h2.revision, h2.compact_revision, h2.hash));
    mismatch(self);
  }
  for (const auto& p : peers) {
    if (!p.ok) continue;
    // A follower's revision is at most the leader's after the read.
    if (p.current_revision > rev2) {
      reasons->push_back(fmt::format(
          "revision from follower must be less than or equal to leader's (leader-revision={}, "
          "follower-revision={}, follower-peer-id={:x})",
          rev2, p.current_revision, p.id));
      mismatch(p.id);
    }
    if (p.hash.compact_revision > h2.compact_revision) {
      reasons->push_back(fmt::format(
          "compact revision from follower must be less than or equal to leader's (leader-compact-revision={}, "
          "follower-compact-revision={}, follower-peer-id={:x})",
          h2.compact_revision, p.hash.compact_revision, p.id));
      mismatch(p.id);
    }
    // The follower hashed at the leader's first revision: with the same
    // compaction, the same history must give the same hash.
    if (p.hash.compact_revision == h.compact_revision && p.hash.hash != h.hash) {
      reasons->push_back(fmt::format(
          "same compact revision then hashes must match (leader-compact-revision={}, leader-hash={}, "
          "follower-compact-revision={}, follower-hash={}, follower-peer-id={:x})",
          h2.compact_revision, h.hash, p.hash.compact_revision, p.hash.hash, p.id));
      mismatch(p.id);
    }
  }
  return alarms;
}

CorruptionChecker::~CorruptionChecker() { stop(); }

Error CorruptionChecker::initial_check() {
  const std::string self = hex(hooks_.self);
  spdlog::info("starting initial corruption check (local-member-id={}, timeout={}ms)", self, hooks_.timeout.count());
  KvHash h;
  if (Error e = hooks_.local_hash(&h)) {
    return Error(e.code(), self + " failed to fetch hash (" + e.message() + ")");
  }
  int mismatches = 0;
  for (const auto& p : hooks_.peer_hashes(h.revision)) {
    std::string local = fmt::format("local-member-id={}, local-member-revision={}, local-member-compact-revision={}, "
                                    "local-member-hash={}, remote-peer-id={:x}, remote-peer-endpoint={}",
                                    self, h.revision, h.compact_revision, h.hash, p.id, p.address);
    std::string remote = p.ok ? fmt::format(", remote-peer-revision={}, remote-peer-compact-revision={}, "
                                            "remote-peer-hash={}",
                                            p.current_revision, p.hash.compact_revision, p.hash.hash)
                              : ", error=" + p.error.message();
    switch (initial_verdict(h, p)) {
      case InitialVerdict::kMatch: break;
      case InitialVerdict::kMismatch:
        spdlog::warn("found different hash values from remote peer ({}{})", local, remote);
        ++mismatches;
        break;
      case InitialVerdict::kCompactDiffers:
        spdlog::warn("found different compact revision values from remote peer ({}{})", local, remote);
        break;
      case InitialVerdict::kPeerBehind:
        spdlog::warn("cannot fetch hash from slow remote peer ({}{})", local, remote);
        break;
      case InitialVerdict::kLocalBehind:
        spdlog::warn("cannot fetch hash from remote peer; local member is behind ({}{})", local, remote);
        break;
      case InitialVerdict::kClusterMismatch:
        spdlog::warn("cluster ID mismatch ({}{})", local, remote);
        break;
      case InitialVerdict::kNoAnswer: break;  // peer_hashes logged "failed hash kv request"
    }
  }
  if (mismatches > 0) return Error(Code::kFailedPrecondition, self + " found data inconsistency with peers");
  spdlog::info("initial corruption checking passed; no corruption (local-member-id={})", self);
  return {};
}

Error CorruptionChecker::periodic_check() {
  KvHash h;
  if (Error e = hooks_.local_hash(&h)) return e;
  std::vector<PeerHash> peers = hooks_.peer_hashes(h.revision);
  if (Error e = hooks_.linearizable_read()) return e;
  KvHash h2;
  if (Error e = hooks_.local_hash(&h2)) return e;
  std::vector<std::string> reasons;
  std::vector<uint64_t> alarms = periodic_verdicts(hooks_.self, h, h2, h2.revision, peers, &reasons);
  for (const auto& r : reasons) spdlog::warn("{}", r);
  for (uint64_t id : alarms) {
    spdlog::warn("raising the CORRUPT alarm for member {:x}", id);
    hooks_.raise_corrupt(id);
  }
  int checked = 0;
  for (const auto& p : peers) checked += p.ok ? 1 : 0;
  spdlog::info("finished peer corruption check (number-of-peers-checked={})", checked);
  return {};
}

void CorruptionChecker::start(std::chrono::milliseconds interval) {
  spdlog::info("enabled corruption checking (local-member-id={:x}, interval={}ms)", hooks_.self, interval.count());
  thread_ = std::thread([this, interval] { run(interval); });
}

void CorruptionChecker::set_leading(bool leading) {
  std::lock_guard<std::mutex> lock(mu_);
  leading_ = leading;
}

void CorruptionChecker::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CorruptionChecker::run(std::chrono::milliseconds interval) {
  set_thread_name("corrupt-check");
  for (;;) {
    bool leading;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, interval, [this] { return stop_; })) return;
      leading = leading_;
    }
    if (!leading) continue;
    if (Error e = periodic_check()) spdlog::warn("failed to check hash KV: {}", e.message());
  }
}

}  // namespace etcdq::member
