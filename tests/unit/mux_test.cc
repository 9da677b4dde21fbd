// net::Mux: the client port's routing of gRPC (HTTP/2) and HTTP/1.1
// connections, on real loopback sockets.
#include "net/mux.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace etcdq::net {
namespace {

const std::string kHttp2Preface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);

TEST(MuxSniff, TellsHttp2FromEverythingElse) {
  EXPECT_EQ(sniff(kHttp2Preface.data(), kHttp2Preface.size()), Sniffed::kHttp2);
  EXPECT_EQ(sniff((kHttp2Preface + "\x00\x00\x12\x04").data(), 28), Sniffed::kHttp2);
  EXPECT_EQ(sniff("PRI * HTTP/2.0\r\n", 16), Sniffed::kNeedMore);
  EXPECT_EQ(sniff("P", 1), Sniffed::kNeedMore);
  EXPECT_EQ(sniff("GET /health HTTP/1.1\r\n", 22), Sniffed::kOther);
  EXPECT_EQ(sniff("POST /v3/kv/range HTTP/1.1\r\n", 28), Sniffed::kOther);
  EXPECT_EQ(sniff("PRI * HTTP/1.1", 14), Sniffed::kOther);
  EXPECT_EQ(sniff("\x16\x03\x01", 3), Sniffed::kOther);  // a TLS ClientHello
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

void send_all(int fd, const std::string& s) { ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size())); }

// Whether the peer closed `fd` within `ms` (a read returns 0 or an error).
bool closed_within(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  ssize_t n = recv(fd, &c, 1, 0);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Records the sockets each route got and what was first read from them.
struct Routed {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> http2, http1;

  Mux::Routes routes(bool with_http1) {
    Mux::Routes r;
    r.http2 = [this](int fd) { take(fd, &http2); };
    if (with_http1) r.http1 = [this](int fd) { take(fd, &http1); };
    return r;
  }
  void take(int fd, std::vector<std::string>* into) {
    // The route reads the connection from its first byte: nothing was
    // consumed by the routing.
    std::string got;
    char buf[256];
    for (int i = 0; i < 100 && got.size() < 4; ++i) {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
      else std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    close(fd);
    std::lock_guard<std::mutex> lock(mu);
    into->push_back(got);
    cv.notify_all();
  }
  bool wait(size_t n2, size_t n1) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return http2.size() >= n2 && http1.size() >= n1; });
  }
};

TEST(Mux, RoutesByTheFirstBytesAndConsumesNothing) {
  Routed got;
  Mux mux(got.routes(true));
  int port = free_port();
  ASSERT_FALSE(mux.listen({{"127.0.0.1", port}}));
  ASSERT_FALSE(mux.start());

  int a = connect_to(port);
  send_all(a, kHttp2Preface + "grpc");
  int b = connect_to(port);
  send_all(b, "GET /health HTTP/1.1\r\n\r\n");
  // The preface in three pieces, with pauses: routed once it is complete.
  int c = connect_to(port);
  send_all(c, "PRI * HT");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  send_all(c, "TP/2.0\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  send_all(c, "SM\r\n\r\n");
  ASSERT_TRUE(got.wait(2, 1));
  std::lock_guard<std::mutex> lock(got.mu);
  EXPECT_EQ(got.http2[0].substr(0, 3), "PRI");
  EXPECT_EQ(got.http2[1].substr(0, 3), "PRI");
  EXPECT_EQ(got.http1[0].substr(0, 4), "GET ");
  close(a);
  close(b);
  close(c);
}

TEST(Mux, WithoutAnHttp1RouteSuchConnectionsAreClosed) {
  Routed got;
  Mux mux(got.routes(false));
  int port = free_port();
  ASSERT_FALSE(mux.listen({{"127.0.0.1", port}}));
  ASSERT_FALSE(mux.start());
  int b = connect_to(port);
  send_all(b, "GET /health HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(closed_within(b, 2000));
  close(b);
  int a = connect_to(port);
  send_all(a, kHttp2Preface);
  EXPECT_TRUE(got.wait(1, 0));
  close(a);
}

TEST(Mux, APrefixedRouteTakesConnectionsThatOpenWithItsMagicOnly) {
  // The peer URL: libraft's raw connections open with a magic of their own
  // (consensus/transport.h), gRPC with the preface; anything else is closed.
  Routed got;
  std::vector<std::string> raw;
  Mux::Routes routes = got.routes(false);
  routes.prefixed.push_back({"etcdqRFT", [&](int fd) { got.take(fd, &raw); }});
  Mux mux(std::move(routes), "peer");
  int port = free_port();
  ASSERT_FALSE(mux.listen({{"127.0.0.1", port}}));
  ASSERT_FALSE(mux.start());
  // The magic in two pieces: routed once it is complete, nothing consumed.
  int a = connect_to(port);
  send_all(a, "etcd");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  send_all(a, "qRFT\x01");
  int b = connect_to(port);
  send_all(b, kHttp2Preface);
  int c = connect_to(port);
  send_all(c, "etcdqXXX");  // starts like the magic, then is not it
  EXPECT_TRUE(closed_within(c, 2000));
  ASSERT_TRUE(got.wait(1, 0));
  {
    std::unique_lock<std::mutex> lock(got.mu);
    ASSERT_TRUE(got.cv.wait_for(lock, std::chrono::seconds(5), [&] { return raw.size() == 1; }));
    EXPECT_EQ(raw[0].substr(0, 9), std::string("etcdqRFT\x01"));
    EXPECT_EQ(got.http2[0].substr(0, 3), "PRI");
    EXPECT_TRUE(got.http1.empty());
  }
  close(a);
  close(b);
  close(c);
}

TEST(Mux, ListenErrorsNameTheListenersRole) {
  Routed got;
  Mux first(got.routes(false), "peer");
  int port = free_port();
  ASSERT_FALSE(first.listen({{"127.0.0.1", port}}));
  Mux second(got.routes(false), "peer");
  Error e = second.listen({{"127.0.0.1", port}});
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find("cannot listen for peers on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << e.message();
}

TEST(Mux, SilentConnectionsCannotCrowdOutNewOnes) {
  Routed got;
  Mux mux(got.routes(true));
  int port = free_port();
  ASSERT_FALSE(mux.listen({{"127.0.0.1", port}}));
  ASSERT_FALSE(mux.start());
  // More silent connections than the mux keeps waiting: the oldest are
  // closed, and a client that then speaks is still routed at once. Both
  // ends are in this process: make room for them.
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 4 * Mux::kMaxPending) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4 * Mux::kMaxPending);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < 3 * Mux::kMaxPending) GTEST_SKIP() << "the descriptor limit is too low for this test";
  std::vector<int> silent;
  for (size_t i = 0; i < Mux::kMaxPending + 16; ++i) silent.push_back(connect_to(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(closed_within(silent.front(), 2000));
  int a = connect_to(port);
  send_all(a, kHttp2Preface);
  EXPECT_TRUE(got.wait(1, 0));
  close(a);
  for (int fd : silent) close(fd);
}

TEST(Mux, ListenNamesTheAddressItCannotTake) {
  Routed got;
  Mux first(got.routes(true));
  int port = free_port();
  ASSERT_FALSE(first.listen({{"127.0.0.1", port}}));
  Mux second(got.routes(true));
  Error e = second.listen({{"127.0.0.1", port}});
  ASSERT_TRUE(e);
  EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.message();
}

}  // namespace
}  // namespace etcdq::net
