// Fuzzes the TLS pump's handling of what a client's records carry (net/
// pump_inbound.h, net/mux.h's pick_route, net/h2_guard.h), over real TLS:
// a server SSL from a TlsContext as the client URLs build it (a
// self-signed certificate, made once), and a client SSL beside it,
// connected through memory. OpenSSL itself (Debian's, not instrumented)
// parses the records; what is fuzzed is the pump's side of SSL_read.
//
// First byte: bit 0 picks the mode.
//   pump (0): the rest is the plaintext a client sends after its
//     handshake, written in records of the input's sizes (bits 1-3), read
//     as the pump reads it (the first bytes until a route is picked, then a
//     buffer at a time), passed through the HTTP/2 guard when the route is
//     HTTP/2, and taken by the route's socket a few bytes at a time (bits
//     4-6); a hold is waited out on a clock of its own. Bit 7: the peer
//     URL's routes (libraft's magic before HTTP/2 and HTTP/1.1).
//   hello (1): the rest is the first bytes a client sends on a new
//     connection (its ClientHello records), taken by a fresh server SSL of
//     the same context, so that the context's own callbacks (ALPN
//     selection, client certificate verification) see hostile hellos.
//
// Invariants (pump): the route picked from the records' bytes as they
// arrive is the one all of the bytes pick; what reaches the route is a
// prefix of what the client sent, in order, nothing lost, doubled or
// reordered, and all of it unless the guard refused the connection or
// holds it waiting for the server; only what the guard passed is sent;
// a read never exceeds the buffer. (hello): ALPN, when selected, is
// http/1.1 or h2.
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/h2_guard.h"
#include "net/mux.h"
#include "net/pump_inbound.h"
#include "net/tls_context.h"

namespace {

using etcdq::net::H2Guard;
using etcdq::net::Picked;
using etcdq::net::PumpInbound;
using Clock = H2Guard::Clock;

void check(bool ok) {
  if (!ok) std::abort();
}

struct Magic {
  std::string magic;
};
// The peer URL's prefixed route: libraft's connections (consensus/transport.h,
// PeerTransport::kMagic).
const std::vector<Magic> kPeerRoutes = {{"etcdqRFT"}};
const std::vector<Magic> kClientRoutes = {};

std::shared_ptr<etcdq::net::TlsContext> server_context;
SSL_CTX* client_context = nullptr;

// A server and a client SSL over memory BIOs; shuttle() moves what each
// wrote to the other.
struct Pair {
  SSL* server = nullptr;
  SSL* client = nullptr;
  BIO *s_in, *s_out, *c_in, *c_out;

  Pair() {
    SSL_CTX* ctx = server_context->current();
    server = SSL_new(ctx);
    SSL_CTX_free(ctx);
    client = SSL_new(client_context);
    s_in = BIO_new(BIO_s_mem());
    s_out = BIO_new(BIO_s_mem());
    c_in = BIO_new(BIO_s_mem());
    c_out = BIO_new(BIO_s_mem());
    SSL_set_bio(server, s_in, s_out);
    SSL_set_bio(client, c_in, c_out);
    SSL_set_accept_state(server);
    SSL_set_connect_state(client);
  }
  ~Pair() {
    SSL_free(server);
    SSL_free(client);
  }
  static void move(BIO* from, BIO* to) {
    char buf[4096];
    int n;
    while ((n = BIO_read(from, buf, sizeof(buf))) > 0) check(BIO_write(to, buf, n) == n);
  }
  void shuttle() {
    move(c_out, s_in);
    move(s_out, c_in);
  }
  bool handshake() {
    for (int i = 0; i < 16; ++i) {
      int c = SSL_do_handshake(client);
      shuttle();
      int s = SSL_do_handshake(server);
      shuttle();
      if (c == 1 && s == 1) return true;
    }
    return false;
  }
  // The pump's read (tls_pump.cc, wire_read): bytes, or 0 for nothing now.
  size_t read(char* buf, size_t n) {
    ERR_clear_error();
    int r = SSL_read(server, buf, static_cast<int>(n));
    if (r > 0) return static_cast<size_t>(r);
    int err = SSL_get_error(server, r);
    check(err == SSL_ERROR_WANT_READ);  // a memory BIO that ran dry; nothing else goes wrong here
    return 0;
  }
};

std::unique_ptr<Pair> established;

Pair& connection() {
  if (!established) {
    established = std::make_unique<Pair>();
    check(established->handshake());
  }
  return *established;
}

void pump(std::string_view sent, uint8_t flags) {
  Pair& p = connection();
  // Records of 1 byte to 16 KiB (the largest); past the first 256 bytes
  // (routing, the preface, the first frames) at least 512 a record, so
  // that an input costs little TLS (the guard's own cuts are
  // fuzz_h2_guard's).
  static constexpr size_t kRecords[] = {1, 3, 9, 24, 100, 700, 4096, 16384};
  const size_t record = kRecords[(flags >> 1) & 7];
  const size_t take = 1 + ((flags >> 4) & 7) * 31;  // the route's socket takes 1 .. 218 bytes a send
  const auto& prefixed = (flags & 0x80) ? kPeerRoutes : kClientRoutes;
  for (size_t i = 0; i < sent.size();) {
    std::string_view r = sent.substr(i, i < 256 ? record : std::max<size_t>(record, 512));
    check(SSL_write(p.client, r.data(), static_cast<int>(r.size())) == static_cast<int>(r.size()));
    i += r.size();
  }
  p.shuttle();

  // Routing: the first bytes, as many reads as it takes. (The guard's
  // shared state outlives the guard, as the process's does.)
  H2Guard::Shared shared(8, 20, 16);  // small, so the fuzzer reaches holds
  PumpInbound in(16 * 1024);
  size_t which = 0, which_all = 0;
  Picked picked;
  for (;;) {
    picked = etcdq::net::pick_route(in.first().data(), in.first().size(), prefixed, &which);
    if (picked != Picked::kNeedMore) break;
    size_t n = p.read(in.first_space(), in.first_room());
    if (n == 0) break;
    check(in.first().size() + n <= H2Guard::kPrefaceBytes);
    in.got_first(n);
  }
  Picked all = etcdq::net::pick_route(sent.data(), sent.size(), prefixed, &which_all);
  std::string routed;
  if (picked == Picked::kNeedMore) {
    check(all == Picked::kNeedMore && in.first() == sent);
    return;
  }
  check(picked == all && (picked != Picked::kPrefixed || which == which_all));

  in.routed(picked == Picked::kHttp2 ? std::make_unique<H2Guard>(&shared) : nullptr);
  Clock::time_point now = Clock::time_point(std::chrono::hours(24 * 365 * 50));
  bool held = false, refused = false;
  Clock::time_point resume{};
  for (int rounds = 0; rounds < 100000; ++rounds) {
    bool progress = false;
    if (in.empty()) {
      size_t n = p.read(in.space(), in.capacity());
      check(n <= in.capacity());
      if (n > 0) {
        in.got(n);
        progress = true;
      }
    }
    if (in.unchecked() && !held) {
      PumpInbound::Verdict v = in.check(now, &resume);
      if (v == PumpInbound::Verdict::kRefused) {
        refused = true;
        break;
      }
      held = v == PumpInbound::Verdict::kHeld;
      if (held) check(resume >= now);
    }
    std::string_view ready = in.sendable();
    if (!ready.empty()) {
      size_t k = std::min(ready.size(), take);
      routed.append(ready.substr(0, k));
      in.sent(k);
      progress = true;
    }
    if (progress) continue;
    if (!held) break;
    // Waiting for the guard: only a hold for the server's answers may last.
    if (std::string_view(in.guard()->why()).find("too many streams wait") != std::string_view::npos) break;
    now = std::max(now, resume);
    held = false;
  }
  check(sent.substr(0, routed.size()) == routed);
  if (!refused && !held) check(routed == sent);
  if (!in.guard()) check(routed == sent);
  // What was left unread goes, so the next input starts on a clean stream.
  char sink[4096];
  while (p.read(sink, sizeof(sink)) > 0) {
  }
}

void hello(std::string_view bytes) {
  Pair p;
  check(BIO_write(p.s_in, bytes.data(), static_cast<int>(bytes.size())) == static_cast<int>(bytes.size()));
  ERR_clear_error();
  SSL_do_handshake(p.server);
  const unsigned char* alpn = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(p.server, &alpn, &len);
  if (len > 0) {
    std::string_view a(reinterpret_cast<const char*>(alpn), len);
    check(a == "http/1.1" || a == "h2");
  }
  ERR_clear_error();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char dir[] = "/tmp/etcdq-fuzz-tls-XXXXXX";
  check(mkdtemp(dir) != nullptr);
  std::string cert, key;
  check(!etcdq::net::self_signed_cert(dir, {"127.0.0.1"}, &cert, &key));
  etcdq::net::TlsOptions o;
  o.cert_file = cert;
  o.key_file = key;
  check(!etcdq::net::TlsContext::open(o, &server_context));
  client_context = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(client_context, SSL_VERIFY_NONE, nullptr);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(client_context, kAlpn, sizeof(kAlpn));
  connection();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    hello(rest);
  } else {
    pump(rest, data[0]);
  }
  return 0;
}
