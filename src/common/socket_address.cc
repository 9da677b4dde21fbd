#include "common/socket_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace etcdq::common {
namespace {

// Family of `fd`'s address, filling host and port for IP ones.
int address_of(int fd, bool remote, std::string* host, int* port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int rc = remote ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                  : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return AF_UNSPEC;
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    *host = buf;
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    *host = buf;
    *port = ntohs(a->sin6_port);
  }
  return ss.ss_family;
}

}  // namespace

bool socket_address(int fd, bool remote, std::string* host, int* port) {
  std::string h;
  int p = 0;
  int family = address_of(fd, remote, &h, &p);
  if (family != AF_INET && family != AF_INET6) return false;
  *host = std::move(h);
  *port = p;
  return true;
}

std::string remote_address(int fd, std::string_view if_unix) {
  std::string host;
  int port = 0;
  switch (address_of(fd, /*remote=*/true, &host, &port)) {
    case AF_INET: return host + ":" + std::to_string(port);
    case AF_INET6: return "[" + host + "]:" + std::to_string(port);
    case AF_UNIX: return std::string(if_unix);
    default: return "?";
  }
}

}  // namespace etcdq::common
