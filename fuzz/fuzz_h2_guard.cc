// Fuzzes the HTTP/2 guard (net/h2_guard.h) the way the TLS pump and the
// plaintext gRPC reads drive it: the input is a script of what a client
// sends, what the server answers, time passing and connections closing,
// with a clock of its own. The first byte picks the shared bucket: the
// process's sizes, or small ones so the fuzzer reaches its edges.
//
//   op 0 n <n bytes>: the client sends them (held bytes go first, once due)
//   op 1 n <n bytes>: the server sends them
//   op 2 t:           t * 7 ms pass (held bytes are offered again when due)
//   op 3:             the connection closes; a new one opens
//
// Invariants: admit() never passes more than it was offered, and a frame
// it holds gets a time to come back at, not before now; a refused
// connection passes nothing more; how the client's bytes are cut into
// reads changes nothing (a twin guard fed a byte at a time passes the same
// bytes, holds and refuses at the same byte, counts the same resets and
// unanswered streams); the shared count of unanswered streams is always
// that of the live guard, and 0 once it closed; held bytes pass once their
// time comes (within a few offers: the buckets refill in floating point)
// unless too many streams wait for the server's answer.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "net/h2_guard.h"

namespace {

using etcdq::net::H2Guard;
using Clock = H2Guard::Clock;

void check(bool ok) {
  if (!ok) std::abort();
}

struct Conn {
  // The twin is fed the same bytes a byte at a time, with its own shared
  // state built alike.
  Conn(double burst, double per_second, int64_t max_unanswered)
      : shared(burst, per_second, max_unanswered),
        twin_shared(burst, per_second, max_unanswered),
        guard(std::make_unique<H2Guard>(&shared)),
        twin(std::make_unique<H2Guard>(&twin_shared)) {}
  ~Conn() {
    guard.reset();
    twin.reset();
    // Closing charged and forgot every stream it left unanswered.
    check(shared.unanswered.load() == 0 && twin_shared.unanswered.load() == 0);
  }

  H2Guard::Shared shared, twin_shared;
  std::unique_ptr<H2Guard> guard, twin;
  std::string pending;  // the client's bytes not yet passed
  bool held = false;
  Clock::time_point resume_at{};
  int offers_without_progress = 0;

  void same() {
    check(guard->refused() == twin->refused());
    check(guard->resets() == twin->resets());
    check(guard->holds() == twin->holds());
    check(guard->server_resets() == twin->server_resets());
    check(guard->unanswered() == twin->unanswered());
    check(guard->refused_streams() == twin->refused_streams() && guard->replies() == twin->replies());
    check(shared.unanswered.load() == static_cast<int64_t>(guard->unanswered()));
    check(twin_shared.unanswered.load() == static_cast<int64_t>(twin->unanswered()));
  }

  // Offers what is pending, as the pump does when it read or a hold is due.
  void offer(Clock::time_point now) {
    if (guard->refused() || pending.empty()) return;
    Clock::time_point resume{};
    // Each guard rewrites the headers of streams it refuses in what it is
    // given: the twin gets its own copy of the client's bytes.
    std::string twin_pending = pending;
    size_t n = guard->admit(pending.data(), pending.size(), now, &resume);
    check(n <= pending.size());
    size_t t = 0;
    Clock::time_point twin_resume{};
    while (t < twin_pending.size() && twin->admit(twin_pending.data() + t, 1, now, &twin_resume) == 1) ++t;
    check(pending.compare(0, n, twin_pending, 0, n) == 0);
    check(t == n);
    same();
    if (guard->refused()) {
      Clock::time_point ignored;
      check(guard->admit(pending.data() + n, pending.size() - n, now, &ignored) == 0);
      pending.clear();
      return;
    }
    held = n < pending.size();
    if (held) {
      check(resume >= now && twin_resume == resume);
      resume_at = resume;
      offers_without_progress = n == 0 ? offers_without_progress + 1 : 0;
      // A due hold passes within a few offers, unless it waits for the
      // server to answer streams (nothing in this script's time does that).
      if (offers_without_progress > 8) check(std::strstr(guard->why(), "too many streams wait") != nullptr);
    } else {
      offers_without_progress = 0;
    }
    pending.erase(0, n);
  }

  void server(std::string_view bytes, Clock::time_point now) {
    guard->server_sent(bytes.data(), bytes.size(), now);
    for (char ch : bytes) twin->server_sent(&ch, 1, now);
    same();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool small = data[0] & 1;
  const double burst = small ? 8 : H2Guard::kThreadBurst;
  const double per_second = small ? 20 : H2Guard::kThreadPerSecond;
  const int64_t max_unanswered = small ? 16 : H2Guard::kMaxUnanswered;
  // A clock far from steady_clock's epoch: the guard's destructor charges
  // at the real now, which then lies in this clock's past (no refill).
  Clock::time_point now = Clock::time_point(std::chrono::hours(24 * 365 * 50));
  auto conn = std::make_unique<Conn>(burst, per_second, max_unanswered);
  size_t i = 1;
  auto take = [&](size_t n) {
    n = std::min(n, size - i);
    std::string_view s(reinterpret_cast<const char*>(data) + i, n);
    i += n;
    return s;
  };
  while (i < size) {
    uint8_t op = data[i++] % 4;
    switch (op) {
      case 0: {
        size_t n = i < size ? data[i++] : 0;
        conn->pending.append(take(n));
        if (!conn->held || now >= conn->resume_at) conn->offer(now);
        break;
      }
      case 1: {
        size_t n = i < size ? data[i++] : 0;
        conn->server(take(n), now);
        break;
      }
      case 2: {
        size_t t = i < size ? data[i++] : 0;
        now += std::chrono::milliseconds(7 * t);
        if (conn->held && now >= conn->resume_at) conn->offer(now);
        break;
      }
      default:
        conn = std::make_unique<Conn>(burst, per_second, max_unanswered);
        break;
    }
  }
  // The end of the script: what is held passes once due.
  for (int k = 0; k < 32 && conn->held && !conn->guard->refused(); ++k) {
    now = std::max(now, conn->resume_at);
    conn->offer(now);
  }
  return 0;
}
