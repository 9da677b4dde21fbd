// The remote end of a connected socket, for logs: "host:port" ("[v6]:port"
// for IPv6), "?" when the socket has none (closed, or not a TCP socket).
// Any thread.
#pragma once

#include <string>

namespace etcdq::net {

std::string remote_address(int fd);

}  // namespace etcdq::net
