#include "member/join_id.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "consensus/forwarder.h"

namespace etcdq::member {

Error learn_joining_id(const std::vector<std::string>& peer_addresses, const std::string& self_address,
                       uint64_t derived, int rounds, const std::function<bool()>& stop, uint64_t* id) {
  // Blocking calls, so every channel and call ends on this thread. The
  // callback API ran its callbacks on gRPC's alternative completion-queue
  // threads (gRPC 1.51 without a background poller); a callback that held
  // the last reference to this Forwarder destroyed the channel there, the
  // last user of that queue, whose shutdown then joined its own thread and
  // freed the queue twice (ASan: double-free in grpc_cq_internal_unref,
  // test_member_ids; gRPC's PR #32584 tells the same story).
  consensus::Forwarder forwarder;
  bool answered = false;
  std::string last_error;
  for (int round = 0; round < rounds; ++round) {
    if (round > 0) {
      if (stop && stop()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    for (const auto& target : peer_addresses) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      peer::ConfigurationResponse conf;
      Error e = consensus::Forwarder::from_status(
          peer::Peer::NewStub(forwarder.channel(target))->Configuration(&ctx, peer::ConfigurationRequest(), &conf));
      if (e) {
        last_error = target + ": " + e.message();
        continue;
      }
      answered = true;
      if (conf.addresses_size() == 0 && conf.members_size() > 0) {
        *id = derived;
        return {};
      }
      for (int i = 0; i < conf.addresses_size() && i < conf.members_size(); ++i) {
        if (conf.addresses(i) == self_address) {
          spdlog::info("member at {} has id {:x} in the cluster (asked {})", self_address, conf.members(i), target);
          *id = conf.members(i);
          return {};
        }
      }
      last_error = target + " lists no member at " + self_address;
    }
  }
  if (!answered) {
    if (!last_error.empty()) spdlog::warn("cannot fetch the cluster's members: {}", last_error);
    return errors::internal(
        "cannot fetch cluster info from peer urls: could not retrieve cluster information from the given URLs");
  }
  return errors::internal("no member of the cluster has peer URL " + self_address + " (" + last_error +
                          "): add it first (etcdctl member add) and start it with the --initial-cluster it prints");
}

bool removed_by_cluster(consensus::Forwarder& forwarder, const std::vector<std::pair<uint64_t, std::string>>& others,
                        uint64_t self) {
  for (const auto& [id, target] : others) {
    auto got = std::make_shared<std::promise<std::pair<Error, peer::ConfigurationResponse>>>();
    auto answer = got->get_future();
    forwarder.configuration(target, std::chrono::seconds(1),
                            [got](Error e, const peer::ConfigurationResponse& r) { got->set_value({e, r}); });
    auto [e, conf] = answer.get();
    if (e || conf.leader() != id || conf.members_size() == 0) continue;
    for (uint64_t m : conf.members()) {
      if (m == self) return false;
    }
    spdlog::warn("the leader {:x} at {} lists no member {:x}", id, target, self);
    return true;
  }
  return false;
}

}  // namespace etcdq::member
