// The addresses of a connected socket, for logs and for cpp-httplib's
// stream interface. Any thread.
#pragma once

#include <string>
#include <string_view>

namespace etcdq::common {

// The host (IPv4 or IPv6, numeric) and port of the socket's peer
// (`remote`) or of its own end. false, leaving both as they were, when the
// socket has none: closed, not connected, or not an IP socket.
bool socket_address(int fd, bool remote, std::string* host, int* port);

// The peer as "host:port" ("[v6]:port" for IPv6); `if_unix` for a Unix
// socket (the TLS pumps hand servers one end of a socketpair); "?" when
// the socket has no peer.
std::string remote_address(int fd, std::string_view if_unix = "?");

}  // namespace etcdq::common
