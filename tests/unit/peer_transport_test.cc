// consensus::PeerTransport's incoming side (consensus/transport.h) on real loopback
// TCP, spoken by hand as a member (or a stranger) would: what libraft reads
// is exactly the checked bytes after a good hello; garbage, oversized
// framing and bad hellos are cut off; a connection that says nothing after
// the magic is closed; many connections stay bounded. libraft itself is
// played by the test (raft_uv_transport's callbacks on a loop thread).
#include "consensus/transport.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace etcdq::consensus {
namespace {

using namespace std::chrono_literals;

void put64(std::string* b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b->push_back(static_cast<char>(v >> (8 * i)));
}

// A RequestVote as libraft 0.15 frames it: preamble, then a 40-byte header.
std::string request_vote() {
  std::string m;
  put64(&m, 3);  // RAFT_IO_REQUEST_VOTE
  put64(&m, 40);
  for (uint64_t w : {7, 2, 100, 6, 0}) put64(&m, w);
  return m;
}

int open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// libraft's part, played on a loop thread: listens, and records every
// stream the transport hands over and the bytes read from it.
class Harness {
 public:
  explicit Harness(PeerTransport::Options opts) : transport_(&loop_, opts) {
    uv_loop_init(&loop_);  // the transport only keeps the pointer until init
    raw_ = transport_.raw();
    raw_->data = this;
    EXPECT_EQ(raw_->init(raw_, 1, "127.0.0.1:1"), 0);
    raw_->listen(raw_, on_accept);
    uv_async_init(&loop_, &stop_, [](uv_async_t* a) {
      auto* self = static_cast<Harness*>(a->data);
      self->raw_->close(self->raw_, [](struct raft_uv_transport*) {});
      for (auto* s : self->streams_) uv_close(reinterpret_cast<uv_handle_t*>(s), [](uv_handle_t* h) { raft_free(h); });
      uv_close(reinterpret_cast<uv_handle_t*>(a), nullptr);
    });
    stop_.data = this;
    listen_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_, 512);
    socklen_t len = sizeof a;
    getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
  }
  ~Harness() {
    uv_async_send(&stop_);
    thread_.join();
    uv_loop_close(&loop_);
    ::close(listen_);
  }

  // A client socket whose server side the transport adopted.
  int connect() {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    transport_.adopt(::accept(listen_, nullptr, nullptr));
    return c;
  }

  size_t accepted() {
    std::lock_guard<std::mutex> lock(mu_);
    return from_.size();
  }
  std::string received() {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }
  int ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  std::vector<raft_id> from() {
    std::lock_guard<std::mutex> lock(mu_);
    return from_;
  }
  size_t incoming() { return transport_.incoming(); }

 private:
  static void on_accept(struct raft_uv_transport* t, raft_id id, const char*, uv_stream_t* stream) {
    auto* self = static_cast<Harness*>(t->data);
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->from_.push_back(id);
    }
    self->streams_.push_back(stream);
    stream->data = self;
    uv_read_start(
        stream, [](uv_handle_t*, size_t, uv_buf_t* buf) { *buf = uv_buf_init(new char[65536], 65536); },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
          auto* self = static_cast<Harness*>(s->data);
          std::lock_guard<std::mutex> lock(self->mu_);
          if (n > 0) self->bytes_.append(buf->base, static_cast<size_t>(n));
          delete[] buf->base;
          if (n < 0) {
            // As libraft does: its end closes once the stream ended.
            ++self->ended_;
            uv_read_stop(s);
            self->streams_.erase(std::find(self->streams_.begin(), self->streams_.end(), s));
            uv_close(reinterpret_cast<uv_handle_t*>(s), [](uv_handle_t* h) { raft_free(h); });
          }
        });
  }

  uv_loop_t loop_;
  PeerTransport transport_;
  struct raft_uv_transport* raw_;
  uv_async_t stop_;
  std::thread thread_;
  int listen_ = -1;
  int port_ = 0;
  std::vector<uv_stream_t*> streams_;  // loop thread
  std::mutex mu_;
  std::vector<raft_id> from_;
  std::string bytes_;
  int ended_ = 0;
};

bool eventually(const std::function<bool()>& f, std::chrono::milliseconds within = 3s) {
  auto end = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return f();
}

void send_all(int fd, const std::string& s) {
  ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

// Whether the transport closed the client's connection within `ms`.
bool closed_within(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  ssize_t n = recv(fd, &c, 1, 0);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

PeerTransport::Options fast() {
  PeerTransport::Options o;
  o.handshake_timeout = 300ms;
  return o;
}

TEST(PeerTransport, AHelloThenWellFramedMessagesReachLibraftByteForByte) {
  Harness h(fast());
  int c = h.connect();
  std::string msgs = request_vote() + request_vote();
  // Split across writes, and the hello's address across two.
  std::string hello = PeerTransport::hello(0x42, "127.0.0.1:2380");
  send_all(c, hello.substr(0, 37));
  std::this_thread::sleep_for(20ms);
  send_all(c, hello.substr(37) + msgs.substr(0, 20));
  std::this_thread::sleep_for(20ms);
  send_all(c, msgs.substr(20));
  ASSERT_TRUE(eventually([&] { return h.received().size() == msgs.size(); }));
  EXPECT_EQ(h.received(), msgs);
  EXPECT_EQ(h.from(), std::vector<raft_id>{0x42});
  // The sender's close ends libraft's stream.
  ::close(c);
  EXPECT_TRUE(eventually([&] { return h.ended() == 1 && h.incoming() == 0; }));
}

TEST(PeerTransport, GarbageAndOversizedFramingAfterTheHelloAreCutOffBeforeLibraftHasThem) {
  Harness h(fast());
  std::string oversized;
  put64(&oversized, 1);
  put64(&oversized, uint64_t{1} << 40);  // a 1 TiB AppendEntries header
  std::string unknown_type;
  put64(&unknown_type, 7);
  put64(&unknown_type, 24);
  unknown_type += std::string(24, 'x');
  std::vector<std::string> bad = {std::string(4096, '\xff'), oversized, unknown_type};
  std::string good = request_vote();
  for (size_t i = 0; i < bad.size(); ++i) {
    int c = h.connect();
    send_all(c, PeerTransport::hello(7, "127.0.0.1:2380") + good);
    ASSERT_TRUE(eventually([&] { return h.received().size() == (i + 1) * good.size(); })) << i;
    send_all(c, bad[i]);
    EXPECT_TRUE(closed_within(c, 3000)) << i;
    ::close(c);
    // libraft saw the good message, then the end; never a byte of the bad one.
    ASSERT_TRUE(eventually([&] { return h.ended() == static_cast<int>(i + 1); })) << i;
  }
  std::string want;
  for (size_t i = 0; i < bad.size(); ++i) want += good;
  EXPECT_EQ(h.received(), want);
  EXPECT_TRUE(eventually([&] { return h.incoming() == 0; }));
}

TEST(PeerTransport, BadHellosAreRefusedAndLibraftNeverHearsOfThem) {
  Harness h(fast());
  std::string base = PeerTransport::hello(7, "127.0.0.1:2380");
  auto with_word = [&](size_t at, uint64_t v) {
    std::string s = base;
    for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
    return s;
  };
  std::vector<std::string> bad = {
      with_word(8, 2),                                // another protocol version
      with_word(16, 0),                               // member id 0
      with_word(24, 12),                              // address length not a multiple of 8
      with_word(24, uint64_t{1} << 32),               // address length far too long
      with_word(24, 8).substr(0, 32) + std::string(8, '\0'),  // empty address
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    int c = h.connect();
    send_all(c, bad[i]);
    EXPECT_TRUE(closed_within(c, 3000)) << i;
    ::close(c);
  }
  EXPECT_EQ(h.accepted(), 0u);
  EXPECT_TRUE(eventually([&] { return h.incoming() == 0; }));
}

TEST(PeerTransport, AConnectionThatSendsTheMagicThenNothingIsClosedAfterTheTimeout) {
  Harness h(fast());
  int fds_before = open_fds();
  std::vector<int> silent;
  for (int i = 0; i < 20; ++i) {
    silent.push_back(h.connect());
    send_all(silent.back(), std::string(PeerTransport::kMagic));
  }
  EXPECT_TRUE(eventually([&] { return h.incoming() == 20; }));
  for (int c : silent) EXPECT_TRUE(closed_within(c, 2000));
  EXPECT_TRUE(eventually([&] { return h.incoming() == 0; }));
  for (int c : silent) ::close(c);
  // Nothing of theirs is held: the member's descriptors are back where they
  // were (give or take one the process opens lazily; 20 held would be 20+).
  EXPECT_TRUE(eventually([&] { return open_fds() <= fds_before + 2; })) << open_fds() << " > " << fds_before;
  EXPECT_EQ(h.accepted(), 0u);
}

TEST(PeerTransport, ManyConnectionsStayBoundedAndANewMemberStillGetsIn) {
  Harness h(fast());
  int fds_before = open_fds();
  std::vector<int> clients;
  for (int i = 0; i < 300; ++i) {
    clients.push_back(h.connect());
    send_all(clients.back(), PeerTransport::hello(1000 + i, "127.0.0.1:2380"));
  }
  // In a burst, some are closed before their hello was read (the one idle
  // longest goes first): libraft hears of at most all of them.
  std::this_thread::sleep_for(500ms);
  EXPECT_GE(h.accepted(), PeerTransport::kMaxIncoming / 2);
  EXPECT_LE(h.accepted(), 300u);
  EXPECT_LE(h.incoming(), PeerTransport::kMaxIncoming);
  // Our 300 client sockets, plus at most three descriptors per live incoming
  // connection (socket, and both ends of its socketpair) and libraft's streams.
  EXPECT_LE(open_fds() - fds_before, 300 + 3 * static_cast<int>(PeerTransport::kMaxIncoming) + 64);
  // A member connecting now still gets through, and its messages arrive.
  int c = h.connect();
  send_all(c, PeerTransport::hello(7, "127.0.0.1:2380") + request_vote());
  EXPECT_TRUE(eventually([&] { return h.received() == request_vote(); }));
  EXPECT_LE(h.incoming(), PeerTransport::kMaxIncoming);
  for (int fd : clients) ::close(fd);
  ::close(c);
  EXPECT_TRUE(eventually([&] { return h.incoming() == 0; }));
}

}  // namespace
}  // namespace etcdq::consensus
