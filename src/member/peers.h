// What the peer server (server/peer_service.h) asks of this member beside
// the calls clients make too: the consensus node's member-to-member side
// (a follower's read index and forwarded proposals, asking another member
// what it publishes or whom it follows, stopping when the leader removed
// us) and the key-space plug-ins' reports. etcd serves these over its peer
// HTTP handlers (etcdserver/api/rafthttp, etcdhttp's peer handlers).
//
// Thread-safety: any thread. Callbacks run once, on consensus's or gRPC's
// threads; they must not block.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "etcdq/command.pb.h"
#include "etcdq/peer.pb.h"
#include "member/context.h"

namespace etcdq::member::peers {

// Leader: confirms leadership and gives an index every write acknowledged
// before the call is at or below (Peer.ReadIndex; consensus/node.h
// read_index). Errors: errors::not_leader() off the leader, the barrier's.
void read_index(Context& ctx, std::function<void(Error, uint64_t index)> done);

// Leader: proposes commands a follower forwarded, each already admitted by
// member/forwarded.h admit_forwarded (consensus copies their bytes into the
// log unopened). `done` once they committed, or the error.
void propose_forwarded(Context& ctx, std::vector<std::string> framed, std::function<void(Error)> done);

// Asks the member at peer `address` (host:port) what it publishes
// (Peer.Attributes) or whom it follows and which members it lists
// (Peer.Configuration), within `timeout`; `done` gets the call's error or
// the answer.
void ask_attributes(Context& ctx, const std::string& address, std::chrono::milliseconds timeout,
                    std::function<void(Error, const apply::MemberAttributes&)> done);
void ask_configuration(Context& ctx, const std::string& address, std::chrono::milliseconds timeout,
                       std::function<void(Error, const peer::ConfigurationResponse&)> done);

// The leader removed this member (confirmed with it): stop, once.
void stop_removed(Context& ctx);

// What this member publishes (its name and client URLs; Peer.Attributes).
const apply::MemberAttributes& self_attributes(const Context& ctx);

// A member's report to the key-space plug-in it is for (keyspace/kind.h,
// peer_report); `from` must be a member (the caller checks). Ignored when
// no plug-in takes it.
void plugin_report(Context& ctx, uint64_t from, const peer::QueueConsumersRequest& report);

}  // namespace etcdq::member::peers
