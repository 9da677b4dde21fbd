#include "member/peers.h"

#include <utility>

#include "consensus/forwarder.h"

namespace etcdq::member::peers {

void read_index(Context& ctx, std::function<void(Error, uint64_t index)> done) {
  ctx.node->read_index(std::move(done));
}

void propose_forwarded(Context& ctx, std::vector<std::string> framed, std::function<void(Error)> done) {
  ctx.node->propose_forwarded(std::move(framed), std::move(done));
}

void ask_attributes(Context& ctx, const std::string& address, std::chrono::milliseconds timeout,
                    std::function<void(Error, const apply::MemberAttributes&)> done) {
  ctx.node->forwarder().attributes(address, timeout, std::move(done));
}

void ask_configuration(Context& ctx, const std::string& address, std::chrono::milliseconds timeout,
                       std::function<void(Error, const peer::ConfigurationResponse&)> done) {
  ctx.node->forwarder().configuration(address, timeout, std::move(done));
}

void stop_removed(Context& ctx) { ctx.node->removed_by_leader(); }

const apply::MemberAttributes& self_attributes(const Context& ctx) { return ctx.self_attributes; }

void plugin_report(Context& ctx, uint64_t from, const peer::QueueConsumersRequest& report) {
  if (ctx.plugins) ctx.plugins->peer_report(from, report);
}

}  // namespace etcdq::member::peers
