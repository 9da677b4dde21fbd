// Round-trip time to every other member, as etcd's prober measures it for
// etcd_network_peer_round_trip_time_seconds{To} (rafthttp/probing_status.go:
// a small request to each peer's URL every few seconds). Every kInterval,
// a thread sends each member in libraft's configuration but this one a
// Peer.Configuration call (a small answer from the member's own state, no
// log access, served on its peer URL: consensus/forwarder.h) and records the
// time from sending to the answer (consensus/metrics.h). A call that fails or
// takes more than kTimeout records nothing; the members' next probes go on.
//
// Thread-safety: start() and stop() from one thread (the member's owner).
// stop() does not wait for calls in flight: their callbacks touch only the
// process-wide histogram, so a member stops at once even when a peer is
// slow to answer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace etcdq::consensus {
class Node;
}

namespace etcdq::member {

class PeerProber {
 public:
  // etcd probes every ConnReadTimeout - 1 s = 4 s.
  static constexpr std::chrono::seconds kInterval{4};
  static constexpr std::chrono::seconds kTimeout{5};

  // `node` must outlive the prober (stop() first).
  explicit PeerProber(consensus::Node* node);
  ~PeerProber();  // stop()
  PeerProber(const PeerProber&) = delete;
  PeerProber& operator=(const PeerProber&) = delete;

  void start();
  void stop();

 private:
  void run();
  void probe_all();

  consensus::Node* node_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace etcdq::member
