// net::H2Guard: the pacing of the stream resets an HTTP/2 client sends
// (rapid reset), on byte streams built frame by frame.
#include "net/h2_guard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace etcdq::net {
namespace {

using Clock = H2Guard::Clock;
using std::chrono::milliseconds;

const std::string kPreface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);

std::string frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  std::string f;
  size_t n = payload.size();
  f += static_cast<char>((n >> 16) & 0xff);
  f += static_cast<char>((n >> 8) & 0xff);
  f += static_cast<char>(n & 0xff);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  f += static_cast<char>((stream >> 24) & 0x7f);
  f += static_cast<char>((stream >> 16) & 0xff);
  f += static_cast<char>((stream >> 8) & 0xff);
  f += static_cast<char>(stream & 0xff);
  return f + payload;
}

std::string settings_ack() { return frame(H2Guard::kSettings, H2Guard::kAckFlag, 0, ""); }
std::string reset(uint32_t stream) { return frame(H2Guard::kRstStream, 0, stream, std::string("\0\0\0\x08", 4)); }
// A HEADERS frame whose payload holds bytes that look like a RST_STREAM
// frame: the guard must skip payloads, not read frames in them.
std::string headers(uint32_t stream) { return frame(0x1, 0x4, stream, reset(stream) + reset(stream)); }

TEST(H2Guard, LetsEverythingThroughWhileTheBurstLasts) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond);
  H2Guard g(&shared);
  std::string in = kPreface + frame(0x4, 0, 0, "");
  for (uint32_t s = 1; s < 2 * 500; s += 2) in += headers(s) + reset(s);
  Clock::time_point resume{};
  auto now = Clock::now();
  EXPECT_EQ(g.admit(in.data(), in.size(), now, &resume), in.size());
  EXPECT_EQ(g.resets(), 500u);
  EXPECT_EQ(g.holds(), 0u);
}

TEST(H2Guard, HoldsTheResetPastTheConnectionsBurstUntilItsTokenIsDue) {
  H2Guard::Shared shared(1e9, 1e9);
  H2Guard g(&shared);
  std::string in = kPreface + settings_ack();
  size_t burst = static_cast<size_t>(H2Guard::kConnBurst);
  for (uint32_t i = 0; i < burst; ++i) in += headers(2 * i + 1) + reset(2 * i + 1);
  size_t allowed = in.size();
  std::string next = headers(2 * burst + 1) + reset(2 * burst + 1);
  in += next + frame(0x0, 0x1, 3, "data after");
  auto now = Clock::now();
  Clock::time_point resume{};
  size_t n = g.admit(in.data(), in.size(), now, &resume);
  // Up to the held frame's header but its last byte.
  EXPECT_EQ(n, allowed + headers(1).size() + H2Guard::kFrameHeaderBytes - 1);
  EXPECT_EQ(g.resets(), burst);
  EXPECT_EQ(g.holds(), 1u);
  auto wait = resume - now;
  EXPECT_GT(wait, milliseconds(0));
  EXPECT_LE(wait, milliseconds(1000 / static_cast<int>(H2Guard::kConnPerSecond) + 1));
  // Too early: still held, nothing more passes.
  Clock::time_point again{};
  EXPECT_EQ(g.admit(in.data() + n, in.size() - n, now, &again), 0u);
  // Once due, the rest goes, split anywhere.
  size_t rest = in.size() - n;
  EXPECT_EQ(g.admit(in.data() + n, 1, resume, &again), 1u);
  EXPECT_EQ(g.admit(in.data() + n + 1, rest - 1, resume, &again), rest - 1);
  EXPECT_EQ(g.resets(), burst + 1);
}

TEST(H2Guard, TheThreadsBucketBoundsManyConnectionsTogether) {
  H2Guard::Shared shared(10, 10);
  H2Guard a(&shared), b(&shared);
  std::string in = kPreface;
  for (uint32_t s = 1; s < 2 * 8; s += 2) in += reset(s);
  auto now = Clock::now();
  Clock::time_point resume{};
  EXPECT_EQ(a.admit(in.data(), in.size(), now, &resume), in.size());  // 8 of the 10
  size_t n = b.admit(in.data(), in.size(), now, &resume);
  EXPECT_EQ(b.resets(), 2u);
  EXPECT_EQ(n, kPreface.size() + 2 * reset(1).size() + H2Guard::kFrameHeaderBytes - 1);
  EXPECT_EQ(resume - now, milliseconds(100));
  // The connection's own token is not lost when the thread's is missing.
  Clock::time_point later = now + std::chrono::seconds(10);
  EXPECT_EQ(b.admit(in.data() + n, in.size() - n, later, &resume), in.size() - n);
  EXPECT_EQ(b.resets(), 8u);
}

TEST(H2Guard, LargeFramesAndByteAtATimeInputAreFramedAlike) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond);
  H2Guard g(&shared);
  std::string big(70000, '\x03');  // a DATA payload of RST_STREAM type bytes
  std::string in = kPreface + frame(0x0, 0, 1, big) + reset(1) + frame(0x0, 0, 3, big.substr(0, 16384));
  auto now = Clock::now();
  Clock::time_point resume{};
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(g.admit(in.data() + i, 1, now, &resume), 1u) << i;
  EXPECT_EQ(g.resets(), 1u);
}

TEST(H2Guard, RefusesAClientThatOpensTooManyStreamsBeforeAcknowledgingTheSettings) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond);
  H2Guard g(&shared);
  std::string in = kPreface;
  for (uint32_t i = 0; i < H2Guard::kStreamsBeforeSettingsAck; ++i) in += headers(2 * i + 1);
  auto now = Clock::now();
  Clock::time_point resume{};
  ASSERT_EQ(g.admit(in.data(), in.size(), now, &resume), in.size());
  EXPECT_FALSE(g.refused());
  std::string more = headers(2 * H2Guard::kStreamsBeforeSettingsAck + 1);
  EXPECT_EQ(g.admit(more.data(), more.size(), now, &resume), H2Guard::kFrameHeaderBytes - 1);
  EXPECT_TRUE(g.refused());
  EXPECT_EQ(g.admit(more.data(), more.size(), now, &resume), 0u);  // and stays refused

  // Once the client acknowledged, gRPC's own limit applies: no count here.
  H2Guard acked(&shared);
  std::string in2 = kPreface + settings_ack();
  for (uint32_t i = 0; i < 3 * H2Guard::kStreamsBeforeSettingsAck; ++i) in2 += headers(2 * i + 1);
  EXPECT_EQ(acked.admit(in2.data(), in2.size(), now, &resume), in2.size());
  EXPECT_FALSE(acked.refused());
}

TEST(H2Guard, ResetsTheServerSendsAreChargedAndHoldTheClientsNextStream) {
  H2Guard::Shared shared(1e9, 1e9);
  H2Guard g(&shared);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  ASSERT_EQ(g.admit(hello.data(), hello.size(), now, &resume), hello.size());
  // The server resets the connection's burst and 50 streams more, none of
  // which it answered (say the client sent DATA after END_STREAM), in
  // pieces of any size.
  std::string out = frame(H2Guard::kSettings, 0, 0, "");
  size_t burst = static_cast<size_t>(H2Guard::kConnBurst);
  for (uint32_t i = 0; i < burst + 50; ++i) out += reset(2 * i + 1);
  for (size_t off = 0; off < out.size(); off += 7) g.server_sent(out.data() + off, std::min<size_t>(7, out.size() - off), now);
  EXPECT_EQ(g.server_resets(), burst + 50);
  // The next stream waits until the 50 are paid for; other frames do not.
  std::string ping = frame(0x6, 0, 0, "12345678");
  EXPECT_EQ(g.admit(ping.data(), ping.size(), now, &resume), ping.size());
  std::string next = headers(2 * burst + 101);
  EXPECT_EQ(g.admit(next.data(), next.size(), now, &resume), H2Guard::kFrameHeaderBytes - 1);
  EXPECT_EQ(resume - now, milliseconds(500));  // 50 at 100 a second
  std::string rest = next.substr(H2Guard::kFrameHeaderBytes - 1);
  EXPECT_EQ(g.admit(rest.data(), rest.size(), resume, &resume), rest.size());
}

TEST(H2Guard, ResetsOfStreamsTheServerAnsweredAreFree) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond);
  H2Guard g(&shared);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  ASSERT_EQ(g.admit(hello.data(), hello.size(), now, &resume), hello.size());
  // 20,000 streams, 10 times the burst, all in the same instant: each
  // answered before it ends. Odd ones the client resets after the answer
  // (clientv3's LeaseKeepAliveOnce), even ones the server ends with
  // trailers and then resets itself (gRPC finishing before the client).
  for (uint32_t i = 0; i < 20000; ++i) {
    uint32_t id = 2 * i + 1;
    std::string open = headers(id);
    ASSERT_EQ(g.admit(open.data(), open.size(), now, &resume), open.size()) << i;
    std::string answer = frame(0x1, 0x4, id, "initial metadata") + frame(0x0, 0, id, "message");
    if (i % 2 == 0) {
      g.server_sent(answer.data(), answer.size(), now);
      std::string cancel = reset(id);
      ASSERT_EQ(g.admit(cancel.data(), cancel.size(), now, &resume), cancel.size()) << i;
    } else {
      answer = frame(0x1, 0x5, id, "trailers only") + reset(id);
      g.server_sent(answer.data(), answer.size(), now);
    }
  }
  EXPECT_EQ(g.resets(), 0u);
  EXPECT_EQ(g.server_resets(), 0u);
  EXPECT_EQ(g.holds(), 0u);
  // A stream it never answered still takes a token.
  std::string unanswered = headers(99999) + reset(99999);
  EXPECT_EQ(g.admit(unanswered.data(), unanswered.size(), now, &resume), unanswered.size());
  EXPECT_EQ(g.resets(), 1u);
}

TEST(H2Guard, StreamsAConnectionAbandonsUnansweredAreChargedAndHoldNewStreamsElsewhere) {
  H2Guard::Shared shared(100, 100);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  {
    H2Guard churn(&shared);
    std::string in = hello;
    for (uint32_t i = 0; i < 300; ++i) in += headers(2 * i + 1);
    ASSERT_EQ(churn.admit(in.data(), in.size(), now, &resume), in.size());
    std::string answer = frame(0x1, 0x4, 1, "initial metadata");  // one answered
    churn.server_sent(answer.data(), answer.size(), now);
    EXPECT_EQ(churn.unanswered(), 299u);
    EXPECT_EQ(shared.unanswered.load(), 299);
  }  // the connection closes: 299 calls canceled at once
  EXPECT_EQ(shared.unanswered.load(), 0);
  // Another connection may still have kUnansweredUnderPressure streams
  // waiting; its next one waits for the debt.
  H2Guard next(&shared);
  std::string in = hello;
  for (uint32_t i = 0; i <= H2Guard::kUnansweredUnderPressure; ++i) in += headers(2 * i + 1);
  size_t n = next.admit(in.data(), in.size(), now, &resume);
  EXPECT_EQ(n, hello.size() + H2Guard::kUnansweredUnderPressure * headers(1).size() + H2Guard::kFrameHeaderBytes - 1);
  // The debt is capped at the burst: 100, at 100 a second (charged at the
  // close's own clock reading, a little after `now`).
  EXPECT_GE(resume - now, milliseconds(1000));
  EXPECT_LT(resume - now, milliseconds(1100));
  auto later = now + milliseconds(1100);
  EXPECT_EQ(next.admit(in.data() + n, in.size() - n, later, &resume), in.size() - n);
}

TEST(H2Guard, AConnectionsOwnRecentResetsTakeAwayItsAllowanceInDebtButAFewDoNot) {
  H2Guard::Shared shared(100, 100);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  H2Guard once(&shared), many(&shared);
  // `once` timed out (reset) one unanswered call; `many` reset 20.
  std::string in1 = hello + headers(1) + reset(1);
  ASSERT_EQ(once.admit(in1.data(), in1.size(), now, &resume), in1.size());
  std::string in2 = hello;
  for (uint32_t i = 0; i < 20; ++i) in2 += headers(2 * i + 1) + reset(2 * i + 1);
  ASSERT_EQ(many.admit(in2.data(), in2.size(), now, &resume), in2.size());
  {
    H2Guard churn(&shared);  // abandons 300 streams: the shared bucket goes into debt
    std::string in = hello;
    for (uint32_t i = 0; i < 300; ++i) in += headers(2 * i + 1);
    ASSERT_EQ(churn.admit(in.data(), in.size(), now, &resume), in.size());
  }
  std::string next = headers(1001);
  EXPECT_EQ(once.admit(next.data(), next.size(), now, &resume), next.size());
  EXPECT_EQ(many.admit(next.data(), next.size(), now, &resume), H2Guard::kFrameHeaderBytes - 1);
}

TEST(H2Guard, AllConnectionsTogetherHaveAtMostTheBoundOfUnansweredStreams) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond, 50);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  H2Guard a(&shared), b(&shared);
  std::string in = hello;
  for (uint32_t i = 0; i < 30; ++i) in += headers(2 * i + 1);
  ASSERT_EQ(a.admit(in.data(), in.size(), now, &resume), in.size());
  // Past the bound, b goes on while its streams are fresh and under
  // kUnansweredUnderPressure; once they are stale (the client left
  // them), its next one waits.
  size_t n = b.admit(in.data(), in.size(), now, &resume);
  EXPECT_EQ(n, in.size());
  EXPECT_EQ(b.unanswered(), 30u);
  std::string next = headers(1001);
  auto later = now + H2Guard::kStaleAfter;
  EXPECT_EQ(b.stale(later), 30u);
  n = b.admit(next.data(), next.size(), later, &resume);
  EXPECT_EQ(n, H2Guard::kFrameHeaderBytes - 1);
  in = next.substr(n);
  // Once a's are answered, b's go on.
  std::string answers;
  for (uint32_t i = 0; i < 30; ++i) answers += frame(0x1, 0x4, 2 * i + 1, "md");
  a.server_sent(answers.data(), answers.size(), now);
  EXPECT_EQ(b.admit(in.data(), in.size(), later, &resume), in.size());
  EXPECT_EQ(shared.unanswered.load(), 31);
}

// A busy client's calls in flight were sent whole (END_STREAM) or are
// still being sent: while others keep the shared bucket in debt, up to
// kUnansweredUnderPressure of them go on. Streams the client opened and
// left (stale: no frame for kStaleAfter, not sent whole) hold it after
// kStaleInDebt.
TEST(H2Guard, InDebtAConnectionKeepsAFewUnansweredAndFewerStale) {
  H2Guard::Shared shared(100, 10);  // in debt for 10 s
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  {
    H2Guard churn(&shared);  // abandons 300 streams: the shared bucket goes into debt
    std::string in = hello;
    for (uint32_t i = 0; i < 300; ++i) in += headers(2 * i + 1);
    ASSERT_EQ(churn.admit(in.data(), in.size(), now, &resume), in.size());
  }
  const size_t kHeld = H2Guard::kUnansweredUnderPressure;
  // Whole calls (HEADERS with END_STREAM, or HEADERS then DATA with
  // END_STREAM) go on while fresh; once the server kept kHeld of them
  // for kStaleAfter, the next waits.
  H2Guard whole(&shared);
  std::string in = hello + frame(0x1, 0x5, 1, "md");
  for (uint32_t i = 1; i < kHeld; ++i) in += frame(0x1, 0x4, 2 * i + 1, "md") + frame(0x0, 0x1, 2 * i + 1, "req");
  ASSERT_EQ(whole.admit(in.data(), in.size(), now, &resume), in.size());
  EXPECT_EQ(whole.unanswered(), kHeld);
  auto later = now + 10 * H2Guard::kStaleAfter;
  EXPECT_EQ(whole.stale(later), 0u);  // sent whole: waiting on the server, never stale
  std::string one_more = frame(0x1, 0x5, 2 * kHeld + 1, "md");
  size_t n = whole.admit(one_more.data(), one_more.size(), later, &resume);
  EXPECT_EQ(n, H2Guard::kFrameHeaderBytes - 1);

  // A client still sending its calls (DATA without END_STREAM) is not
  // stale while it sends; one that stops is.
  H2Guard busy(&shared);
  std::string start = hello;
  for (uint32_t i = 0; i < 10; ++i) start += frame(0x1, 0x4, 2 * i + 1, "md");
  ASSERT_EQ(busy.admit(start.data(), start.size(), now, &resume), start.size());
  auto t1 = now + H2Guard::kStaleAfter / 2;
  std::string more;
  for (uint32_t i = 0; i < 8; ++i) more += frame(0x0, 0x0, 2 * i + 1, "part of a big request");
  ASSERT_EQ(busy.admit(more.data(), more.size(), t1, &resume), more.size());
  auto t2 = now + H2Guard::kStaleAfter;
  EXPECT_EQ(busy.stale(t2), 2u);  // streams 17 and 19 sent nothing since `now`
  std::string next = frame(0x1, 0x4, 101, "md");
  EXPECT_EQ(busy.admit(next.data(), next.size(), t2, &resume), next.size());
  // Past kStaleAfter from t1 every one of them is stale: the next waits.
  auto t3 = t1 + H2Guard::kStaleAfter;
  EXPECT_EQ(busy.stale(t3), 10u);  // 101 was opened at t2
  std::string after = frame(0x1, 0x4, 103, "md");
  n = busy.admit(after.data(), after.size(), t3, &resume);
  EXPECT_EQ(n, H2Guard::kFrameHeaderBytes - 1);
  // Answers and resets of its streams take them off the count.
  std::string answers;
  for (uint32_t i = 0; i < 8; ++i) answers += frame(0x1, 0x4, 2 * i + 1, "md");
  answers += frame(0x3, 0, 17, std::string("\0\0\0\x08", 4));
  busy.server_sent(answers.data(), answers.size(), t3);
  EXPECT_EQ(busy.stale(t3), 1u);
  EXPECT_EQ(busy.admit(after.data() + n, after.size() - n, t3, &resume), after.size() - n);
}

// The attack that closed busy plaintext connections: one connection opens
// thousands of streams and closes (the shared bucket goes into debt) while
// another has hundreds of calls in flight, each sent whole and answered in
// turn. That one goes on; one that opens streams and sends nothing more is
// held at kUnansweredUnderPressure, fresh or not, and one whose streams are
// sent whole and never answered at kWholeInFlightUnderPressure.
TEST(H2Guard, InSharedDebtABusyConnectionWithManyWholeCallsInFlightGoesOn) {
  H2Guard::Shared shared(100, 10);  // in debt for 10 s
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  {
    H2Guard churn(&shared);
    std::string in = hello;
    for (uint32_t i = 0; i < 4000; ++i) in += headers(2 * i + 1);
    ASSERT_EQ(churn.admit(in.data(), in.size(), now, &resume), in.size());
  }
  ASSERT_GT(shared.resets.paid_at(now), now + std::chrono::seconds(5));
  H2Guard busy(&shared);
  ASSERT_EQ(busy.admit(hello.data(), hello.size(), now, &resume), hello.size());
  // 200 calls in flight at a time; the server answers the oldest 50 every
  // 10 ms, and the client sends 50 more.
  uint32_t next = 1, oldest = 1;
  auto t = now;
  for (int round = 0; round < 40; ++round, t += milliseconds(10)) {
    std::string in;
    while (next < oldest + 2 * 200) {
      in += frame(0x1, 0x4, next, "md") + frame(0x0, 0x1, next, "req");
      next += 2;
    }
    ASSERT_EQ(busy.admit(in.data(), in.size(), t, &resume), in.size()) << "round " << round;
    EXPECT_EQ(busy.unanswered(), 200u);
    std::string answers;
    for (int k = 0; k < 50; ++k, oldest += 2) answers += frame(0x1, 0x4, oldest, "md") + frame(0x1, 0x5, oldest, "tr");
    busy.server_sent(answers.data(), answers.size(), t);
  }
  EXPECT_EQ(busy.holds(), 0u);
  // Answered at that rate, it may have more in flight: 600 at once.
  std::string in600;
  while (next < oldest + 2 * 600) {
    in600 += frame(0x1, 0x4, next, "md") + frame(0x0, 0x1, next, "req");
    next += 2;
  }
  ASSERT_EQ(busy.admit(in600.data(), in600.size(), t, &resume), in600.size());
  EXPECT_EQ(busy.unanswered(), 600u);
  // Streams sent whole and never answered (Watch streams with END_STREAM
  // before any request): held at kWholeInFlightUnderPressure.
  H2Guard watcher(&shared);
  std::string w = hello;
  for (uint32_t i = 0; i <= H2Guard::kWholeInFlightUnderPressure; ++i) w += frame(0x1, 0x5, 2 * i + 1, "md");
  size_t held_at = w.size() - H2Guard::kFrameHeaderBytes - 2 + H2Guard::kFrameHeaderBytes - 1;
  EXPECT_EQ(watcher.admit(w.data(), w.size(), t, &resume), held_at);
  EXPECT_EQ(watcher.unanswered(), H2Guard::kWholeInFlightUnderPressure);
  // Streams opened and not sent whole: held at kUnansweredUnderPressure.
  H2Guard opener(&shared);
  std::string in = hello;
  for (uint32_t i = 0; i <= H2Guard::kUnansweredUnderPressure; ++i) in += headers(2 * i + 1);
  size_t n = opener.admit(in.data(), in.size(), t, &resume);
  EXPECT_EQ(n, hello.size() + H2Guard::kUnansweredUnderPressure * headers(1).size() + H2Guard::kFrameHeaderBytes - 1);
  EXPECT_EQ(opener.unanswered(), H2Guard::kUnansweredUnderPressure);
}

// Past kMaxUnanswered of all connections, a connection the server answers
// faster than it has calls in flight goes on; one that just opened as many
// waits.
TEST(H2Guard, PastTheBoundAConnectionAnsweredAsFastAsItSendsGoesOn) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond, 500);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  H2Guard hog(&shared), busy(&shared), fresh(&shared);
  std::string in = hello;
  for (uint32_t i = 0; i < 500; ++i) in += headers(2 * i + 1);
  ASSERT_EQ(hog.admit(in.data(), in.size(), now, &resume), in.size());  // the bound is reached
  ASSERT_EQ(busy.admit(hello.data(), hello.size(), now, &resume), hello.size());
  uint32_t next = 1, oldest = 1;
  auto t = now;
  for (int round = 0; round < 40; ++round, t += milliseconds(10)) {
    std::string calls;
    // 60 in flight at first (a client with few calls goes on past the
    // bound), 200 once the server answered some 200 of them.
    size_t in_flight = round < 5 ? 60 : 200;
    while (next < oldest + 2 * in_flight) {
      calls += frame(0x1, 0x4, next, "md") + frame(0x0, 0x1, next, "req");
      next += 2;
    }
    ASSERT_EQ(busy.admit(calls.data(), calls.size(), t, &resume), calls.size()) << "round " << round;
    std::string answers;
    for (int k = 0; k < 50; ++k, oldest += 2) answers += frame(0x1, 0x5, oldest, "tr");
    busy.server_sent(answers.data(), answers.size(), t);
  }
  std::string w = hello;
  for (uint32_t i = 0; i < 200; ++i) w += frame(0x1, 0x5, 2 * i + 1, "md");
  EXPECT_LT(fresh.admit(w.data(), w.size(), t, &resume), w.size());
  EXPECT_EQ(fresh.unanswered(), H2Guard::kUnansweredUnderPressure);
}

// Many connections each under kUnansweredUnderPressure must not add up
// without bound: past twice the bound, only a few streams a connection.
TEST(H2Guard, PastTwiceTheBoundAConnectionKeepsOnlyAFewUnanswered) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond, 50);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string hello = kPreface + settings_ack();
  std::vector<std::unique_ptr<H2Guard>> conns;
  std::string in = hello;
  for (uint32_t i = 0; i < 10; ++i) in += frame(0x1, 0x5, 2 * i + 1, "md");  // whole, never answered
  size_t last = 0;
  for (int c = 0; c < 20; ++c) {
    conns.push_back(std::make_unique<H2Guard>(&shared));
    conns.back()->admit(in.data(), in.size(), now, &resume);
    last = conns.back()->unanswered();
  }
  // 10 connections reach twice the bound (10 each: under 64, fresh or
  // whole); each later one keeps kStaleInDebt, as a client with few calls.
  EXPECT_EQ(shared.unanswered.load(), 100 + 10 * static_cast<int64_t>(H2Guard::kStaleInDebt));
  EXPECT_EQ(last, H2Guard::kStaleInDebt);
}

// Past kMaxConcurrentStreams open streams a new one is refused as Go's
// http2 server refuses one: RST_STREAM(REFUSED_STREAM) owed to the client,
// and its HEADERS passed on with an even stream id, which gRPC decodes (the
// HPACK table stays in step) and drops.
TEST(H2Guard, RefusesAStreamPastTheCapAndLetsOneInOnceAStreamEnded) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond);
  H2Guard g(&shared);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string in = kPreface + settings_ack();
  for (uint32_t i = 0; i < H2Guard::kMaxConcurrentStreams; ++i) in += frame(0x1, 0x4, 2 * i + 1, "h");
  ASSERT_EQ(g.admit(in.data(), in.size(), now, &resume), in.size());
  // Half of them answered (a Watch that sent its first response).
  std::string answers;
  for (uint32_t i = 0; i < H2Guard::kMaxConcurrentStreams; i += 2) answers += frame(0x1, 0x4, 2 * i + 1, "m");
  g.server_sent(answers.data(), answers.size(), now);
  EXPECT_TRUE(g.replies().empty());

  const uint32_t past = 2 * H2Guard::kMaxConcurrentStreams + 1;
  std::string next = frame(0x1, 0x4, past, "h") + frame(0x0, 0x1, past, "request");
  std::string sent = next;
  ASSERT_EQ(g.admit(next.data(), next.size(), now, &resume), next.size());
  EXPECT_EQ(g.refused_streams(), 1u);
  EXPECT_FALSE(g.refused());
  // What reaches gRPC: the same frames but the HEADERS' stream id, made even.
  EXPECT_EQ(next, frame(0x1, 0x4, past - 1, "h") + frame(0x0, 0x1, past, "request"));
  EXPECT_EQ(g.replies(), frame(H2Guard::kRstStream, 0, past, std::string("\0\0\0\x07", 4)));
  EXPECT_TRUE(g.server_between_frames());
  g.replies_sent(5);
  EXPECT_TRUE(g.replies_mid_frame());
  g.replies_sent(8);
  EXPECT_TRUE(g.replies().empty());
  EXPECT_FALSE(g.replies_mid_frame());
  // The client's reset of the refused stream costs nothing.
  std::string cancel = reset(past);
  ASSERT_EQ(g.admit(cancel.data(), cancel.size(), now, &resume), cancel.size());
  EXPECT_EQ(g.resets(), 0u);

  // The server ends one stream (trailers): the next new stream passes as it is.
  std::string trailers = frame(0x1, 0x5, 1, "t");
  g.server_sent(trailers.data(), trailers.size(), now);
  std::string later = frame(0x1, 0x4, past + 2, "h");
  const std::string unchanged = later;
  ASSERT_EQ(g.admit(later.data(), later.size(), now, &resume), later.size());
  EXPECT_EQ(later, unchanged);
  EXPECT_EQ(g.refused_streams(), 1u);
  EXPECT_TRUE(g.replies().empty());
  // A partly sent server frame: replies wait for its end.
  std::string more = frame(0x1, 0x4, past + 4, "h");
  ASSERT_EQ(g.admit(more.data(), more.size(), now, &resume), more.size());
  EXPECT_FALSE(g.replies().empty());
  std::string half = frame(0x0, 0, 3, "0123456789").substr(0, 12);
  g.server_sent(half.data(), half.size(), now);
  EXPECT_FALSE(g.server_between_frames());
  std::string rest = frame(0x0, 0, 3, "0123456789").substr(12);
  g.server_sent(rest.data(), rest.size(), now);
  EXPECT_TRUE(g.server_between_frames());
}

TEST(H2Guard, ClosesAConnectionThatOpensAStreamPastTheCapWithContinuationFrames) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond);
  H2Guard g(&shared);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string in = kPreface + settings_ack();
  for (uint32_t i = 0; i < H2Guard::kMaxConcurrentStreams; ++i) in += frame(0x1, 0x4, 2 * i + 1, "h");
  ASSERT_EQ(g.admit(in.data(), in.size(), now, &resume), in.size());
  std::string split = frame(0x1, 0x0, 2 * H2Guard::kMaxConcurrentStreams + 1, "h") +
                      frame(0x9, 0x4, 2 * H2Guard::kMaxConcurrentStreams + 1, "h");
  EXPECT_EQ(g.admit(split.data(), split.size(), now, &resume), H2Guard::kFrameHeaderBytes - 1);
  EXPECT_TRUE(g.refused());
}

TEST(H2Guard, ClosesAConnectionThatDoesNotReadItsRefusals) {
  H2Guard::Shared shared(H2Guard::kThreadBurst, H2Guard::kThreadPerSecond);
  H2Guard g(&shared);
  auto now = Clock::now();
  Clock::time_point resume{};
  std::string in = kPreface + settings_ack();
  uint32_t id = 1;
  for (uint32_t i = 0; i < H2Guard::kMaxConcurrentStreams; ++i, id += 2) in += frame(0x1, 0x4, id, "h");
  ASSERT_EQ(g.admit(in.data(), in.size(), now, &resume), in.size());
  const size_t fit = H2Guard::kMaxRepliesBytes / (H2Guard::kFrameHeaderBytes + 4);
  std::string past;
  for (size_t i = 0; i < fit; ++i, id += 2) past += frame(0x1, 0x4, id, "h");
  ASSERT_EQ(g.admit(past.data(), past.size(), now, &resume), past.size());
  EXPECT_FALSE(g.refused());
  std::string one_more = frame(0x1, 0x4, id, "h");
  EXPECT_LT(g.admit(one_more.data(), one_more.size(), now, &resume), one_more.size());
  EXPECT_TRUE(g.refused());
}

TEST(TokenBucket, RefillsAtItsRateUpToItsBurst) {
  TokenBucket b(2, 4);
  auto t = Clock::now();
  EXPECT_TRUE(b.take(t));
  EXPECT_TRUE(b.take(t));
  EXPECT_FALSE(b.take(t));
  EXPECT_EQ(b.next_token(t) - t, milliseconds(250));
  EXPECT_TRUE(b.take(t + milliseconds(250)));
  EXPECT_FALSE(b.take(t + milliseconds(250)));
  auto much_later = t + std::chrono::hours(1);
  EXPECT_TRUE(b.take(much_later));
  EXPECT_TRUE(b.take(much_later));
  EXPECT_FALSE(b.take(much_later));  // never more than the burst
}

}  // namespace
}  // namespace etcdq::net
