#include "member/peer_prober.h"

#include <vector>

#include "common/thread_name.h"
#include "consensus/metrics.h"
#include "consensus/node.h"

namespace etcdq::member {

PeerProber::PeerProber(consensus::Node* node) : node_(node) {}

PeerProber::~PeerProber() { stop(); }

void PeerProber::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    set_thread_name("peer-prober");
    run();
  });
}

void PeerProber::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeerProber::run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (cv_.wait_for(l, kInterval, [this] { return stop_; })) break;
    l.unlock();
    probe_all();
    l.lock();
  }
}

void PeerProber::probe_all() {
  uint64_t self = node_->id();
  for (const consensus::MemberState& m : node_->members()) {
    if (m.id == self || m.address.empty()) continue;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
    }
    auto sent = std::chrono::steady_clock::now();
    uint64_t to = m.id;
    node_->forwarder().configuration(
        m.address, std::chrono::duration_cast<std::chrono::milliseconds>(kTimeout),
        [sent, to](Error e, const peer::ConfigurationResponse&) {
          if (e) return;
          std::chrono::duration<double> rtt = std::chrono::steady_clock::now() - sent;
          consensus::peer_round_trip_seconds(to).Observe(rtt.count());
        });
  }
}

}  // namespace etcdq::member
