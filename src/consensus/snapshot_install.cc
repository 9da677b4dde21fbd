#include "consensus/snapshot_install.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include "common/state_pairs.h"
#include "consensus/metrics.h"

namespace etcdq::consensus {

Error write_plan(const std::string& path, const InstallPlan& plan) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << plan.min_index << "\n";
    for (const auto& t : plan.targets) out << t << "\n";
    out.flush();
    if (!out) return errors::internal("cannot write " + tmp);
  }
  int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return errors::internal("cannot write " + path + ": " + ec.message());
  int dfd = ::open(std::filesystem::path(path).parent_path().c_str(), O_RDONLY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

bool read_plan(const std::string& path, InstallPlan* plan) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  if (!std::getline(in, line)) return false;
  try {
    plan->min_index = std::stoull(line);
  } catch (...) {
    return false;
  }
  plan->targets.clear();
  while (std::getline(in, line)) {
    if (!line.empty()) plan->targets.push_back(line);
  }
  return true;
}

void remove_plan(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

namespace {

// The bound on a staged state's applied index (stage_state): the last log
// index of the leader, found through `witnesses` but `source` (each asked
// for at most a second; a witness that does not lead names the leader,
// which is asked next). 0 when no leader answered, or when the leader is
// `source` itself (*why says which).
//
// Sound: a leader's log holds every entry committed in its term or before
// (Raft's leader completeness), and a member applies only committed
// entries; so any real state read before the question is at or below it.
// A deposed leader that does not know it yet may answer low; the state is
// then refused and fetched again, and the next round asks the new leader.
struct LeaderBound {
  uint64_t index = 0;
  std::string leader, why;
};

uint64_t leader_last_index(Forwarder& forwarder, const std::vector<std::string>& witnesses,
                           const std::string& source, std::string* leader, std::string* why) {
  auto ask = [&](const std::string& w, peer::ConfigurationResponse* conf) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return peer::Peer::NewStub(forwarder.channel(w))->Configuration(&ctx, peer::ConfigurationRequest(), conf).ok();
  };
  *why = "no leader answered";
  for (const auto& w : witnesses) {
    if (w == source) continue;
    peer::ConfigurationResponse conf;
    if (!ask(w, &conf)) continue;
    if (conf.is_leader() && conf.last_index() > 0) {
      *leader = w;
      return conf.last_index();
    }
    std::string named;
    for (int i = 0; i < conf.members_size() && i < conf.addresses_size(); ++i) {
      if (conf.members(i) == conf.leader()) named = conf.addresses(i);
    }
    if (named == source) {
      *why = "its sender leads (as " + w + " says)";
      return 0;
    }
    peer::ConfigurationResponse lead;
    if (!named.empty() && named != w && ask(named, &lead) && lead.is_leader() && lead.last_index() > 0) {
      *leader = named;
      return lead.last_index();
    }
  }
  return 0;
}

}  // namespace

Error stage_state(Fsm* fsm, Forwarder& forwarder, const InstallPlan& plan, std::unique_ptr<Fsm::Staged>* out,
                  const std::function<uint64_t(const std::string&)>& member_of, const std::atomic<bool>* cancel,
                  bool quiet) {
  Error last = errors::internal("no member to fetch the state from");
  for (const auto& target : plan.targets) {
    if (!quiet) spdlog::info("fetching the state at index {} or later from {}", plan.min_index, target);
    uint64_t from = member_of ? member_of(target) : 0;
    std::optional<SnapshotReceiveMetrics> counted;
    if (from != 0) counted.emplace(snapshot_receive_metrics(from));
    if (counted) counted->inflight.Increment();
    auto start = std::chrono::steady_clock::now();
    // The transfer's phases, logged: how long until the first pairs came,
    // how many came, and the whole transfer (with writing them aside).
    uint64_t pairs = 0, bytes = 0;
    double first_s = -1, write_s = 0;
    uint32_t crc = 0;  // of every chunk's packed bytes (SnapshotChunk.packed_crc32)
    // The leader's last index is asked beside the transfer, once the first
    // chunk shows the sender has read its state (so the answer bounds it):
    // asked after the transfer, its round trip (or a witness's 1 s
    // deadline) was on every install's path. std::async's future waits for
    // the question in its destructor, on every path out of this iteration.
    const std::vector<std::string>& witnesses = plan.witnesses.empty() ? plan.targets : plan.witnesses;
    std::future<LeaderBound> bound_asked;
    last = fsm->stage(
        [&](const Fsm::PairSink& sink) {
          return forwarder.fetch_snapshot(target, plan.min_index, [&](const peer::SnapshotChunk& c) -> Error {
            if (cancel != nullptr && cancel->load()) return errors::internal("the fetch was cancelled");
            if (first_s < 0) {
              first_s = metrics::seconds_since(start);
              bound_asked = std::async(std::launch::async, [&forwarder, &witnesses, &target] {
                LeaderBound b;
                b.index = leader_last_index(forwarder, witnesses, target, &b.leader, &b.why);
                return b;
              });
            }
            auto chunk_start = std::chrono::steady_clock::now();
            for (const auto& p : c.pairs()) {
              ++pairs;
              bytes += p.key().size() + p.value().size();
              if (Error e = sink(p.cf(), p.key(), p.value())) return e;
            }
            // What a sender that packs them sends (common/state_pairs.h).
            if (Error e = state_pairs::for_each(c.packed(), [&](uint32_t cf, std::string_view key,
                                                                std::string_view value) -> Error {
                  ++pairs;
                  bytes += key.size() + value.size();
                  return sink(cf, key, value);
                })) {
              return e;
            }
            write_s += metrics::seconds_since(chunk_start);
            // Before the state is ingested (restore_staged): bytes changed on
            // the way or by the sender are refused. A sender without the
            // field (older) is taken unchecked.
            crc = state_pairs::checksum(crc, c.packed());
            if (c.last() && c.has_packed_crc32() && c.packed_crc32() != crc) {
              return errors::internal(fmt::format("the state from {} fails its checksum (crc32 {:08x}, sent {:08x})",
                                                  target, crc, c.packed_crc32()));
            }
            return {};
          });
        },
        out);
    // The sender checks it too; a state below the snapshot's index would
    // have the entries up to it applied again.
    if (!last && (*out)->applied_index() < plan.min_index) {
      last = errors::internal("the state from " + target + " is at index " + std::to_string((*out)->applied_index()) +
                              ", below the snapshot's " + std::to_string(plan.min_index));
      out->reset();
    }
    if (!last && bound_asked.valid()) {
      const LeaderBound bound = bound_asked.get();
      if (bound.index == 0) {
        spdlog::info("the state from {} at index {} is taken without an upper bound: {}", target,
                     (*out)->applied_index(), bound.why);
      } else if ((*out)->applied_index() > bound.index) {
        last = errors::internal(fmt::format("the state from {} is at index {}, past the last index {} of the leader at {}",
                                            target, (*out)->applied_index(), bound.index, bound.leader));
        out->reset();
      }
    }
    if (!last) {
      // The rest of the time is the transfer's: waiting for the next chunk.
      spdlog::info(
          "fetched the state from {}: {} pairs, {} bytes in {:.3f} s (first pairs after {:.3f} s; writing them "
          "{:.3f} s)",
          target, pairs, bytes, metrics::seconds_since(start), first_s, write_s);
    }
    if (counted) {
      counted->inflight.Decrement();
      if (!last) {
        counted->success.Increment();
        counted->seconds.Observe(metrics::seconds_since(start));
      } else {
        counted->failures.Increment();
      }
    }
    if (!last) return {};
    if (!quiet) spdlog::warn("fetching the state from {} failed: {}", target, last.message());
    if (cancel != nullptr && cancel->load()) break;
  }
  return last;
}

Error fetch_state(Fsm* fsm, Forwarder& forwarder, const InstallPlan& plan, bool* damaged,
                  const std::function<uint64_t(const std::string&)>& member_of, bool quiet) {
  *damaged = false;
  std::unique_ptr<Fsm::Staged> staged;
  if (Error e = stage_state(fsm, forwarder, plan, &staged, member_of, nullptr, quiet)) return e;
  return fsm->restore_staged(*staged, damaged);
}

namespace {

void add_install_target(std::vector<std::string>* targets, const std::string& t, const std::string& self) {
  if (t.empty() || t == self || std::find(targets->begin(), targets->end(), t) != targets->end()) return;
  targets->push_back(t);
}

// The peer addresses the members at `targets` list (Peer.Configuration),
// each asked for at most a second. Blocking calls: a callback on gRPC's
// thread must not outlive the caller's Forwarder (member/join_id.cc says
// why).
std::vector<std::string> addresses_known_to(Forwarder& forwarder, const std::vector<std::string>& targets) {
  std::vector<std::string> all;
  for (const auto& t : targets) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    peer::ConfigurationResponse conf;
    if (peer::Peer::NewStub(forwarder.channel(t))->Configuration(&ctx, peer::ConfigurationRequest(), &conf).ok()) {
      all.insert(all.end(), conf.addresses().begin(), conf.addresses().end());
    }
  }
  return all;
}

}  // namespace

void fetch_planned_state(Fsm* fsm, InstallPlan plan, const std::vector<std::string>& more, const std::string& self,
                         const std::function<bool()>& stop, bool* stopped) {
  using Clock = std::chrono::steady_clock;
  *stopped = false;
  std::vector<std::string> targets;
  for (const auto& t : plan.targets) add_install_target(&targets, t, self);
  for (const auto& t : more) add_install_target(&targets, t, self);
  auto backoff = kStartRetryFirst;
  const auto first = Clock::now();
  Clock::time_point logged{};
  Forwarder forwarder;
  for (int round = 1;; ++round) {
    // A target at a time, so that each one's failure can be told.
    const bool quiet = round > 1;
    std::string failures;
    for (const auto& t : targets) {
      InstallPlan one{plan.min_index, {t}, targets};
      bool damaged = false;
      Error e = fetch_state(fsm, forwarder, one, &damaged, {}, quiet);
      if (!e) return;
      failures += (failures.empty() ? "" : "; ") + t + ": " + e.message();
    }
    // Members added since the install began: any reachable one lists them.
    const size_t known = targets.size();
    for (const auto& t : addresses_known_to(forwarder, targets)) add_install_target(&targets, t, self);
    if (round == 1 || Clock::now() - logged >= kStartLogEvery) {
      logged = Clock::now();
      spdlog::warn(
          "no member could send the state at index {} or later ({} rounds in {:.0f} s; {}){}; trying again every "
          "{:.1f} s at most",
          plan.min_index, round, std::chrono::duration<double>(logged - first).count(),
          failures.empty() ? std::string("no member known") : failures,
          targets.size() > known ? fmt::format("; {} more members learned from those", targets.size() - known) : "",
          std::chrono::duration<double>(kStartRetryMax).count());
    }
    const auto until = Clock::now() + backoff;
    while (Clock::now() < until) {
      if (stop && stop()) {
        *stopped = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(kStartRetryMax));
  }
}

}  // namespace etcdq::consensus
