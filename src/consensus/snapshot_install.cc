#include "consensus/snapshot_install.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

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

Error stage_state(Fsm* fsm, Forwarder& forwarder, const InstallPlan& plan, std::unique_ptr<Fsm::Staged>* out,
                  const std::function<uint64_t(const std::string&)>& member_of, const std::atomic<bool>* cancel) {
  Error last = errors::internal("no member to fetch the state from");
  for (const auto& target : plan.targets) {
    spdlog::info("fetching the state at index {} or later from {}", plan.min_index, target);
    uint64_t from = member_of ? member_of(target) : 0;
    std::optional<SnapshotReceiveMetrics> counted;
    if (from != 0) counted.emplace(snapshot_receive_metrics(from));
    if (counted) counted->inflight.Increment();
    auto start = std::chrono::steady_clock::now();
    // The transfer's phases, logged: how long until the first pairs came,
    // how many came, and the whole transfer (with writing them aside).
    uint64_t pairs = 0, bytes = 0;
    double first_s = -1, write_s = 0;
    last = fsm->stage(
        [&](const Fsm::PairSink& sink) {
          return forwarder.fetch_snapshot(target, plan.min_index, [&](const peer::SnapshotChunk& c) -> Error {
            if (cancel != nullptr && cancel->load()) return errors::internal("the fetch was cancelled");
            if (first_s < 0) first_s = metrics::seconds_since(start);
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
    spdlog::warn("fetching the state from {} failed: {}", target, last.message());
    if (cancel != nullptr && cancel->load()) break;
  }
  return last;
}

Error fetch_state(Fsm* fsm, Forwarder& forwarder, const InstallPlan& plan, bool* damaged,
                  const std::function<uint64_t(const std::string&)>& member_of) {
  *damaged = false;
  std::unique_ptr<Fsm::Staged> staged;
  if (Error e = stage_state(fsm, forwarder, plan, &staged, member_of)) return e;
  return fsm->restore_staged(*staged, damaged);
}

}  // namespace etcdq::consensus
