// Bounds the HTTP/2 streams a client resets or abandons before the server
// answered them, before gRPC reads them (CVE-2023-44487, "rapid reset",
// and its variants).
//
// Why here: a client that opens a stream and resets it at once (HEADERS,
// then RST_STREAM) costs it two small frames, while gRPC 1.51 (Debian's;
// the fix came in 1.56.3) creates a call for each and cancels it on its
// executor threads, about ten times slower than one connection can send
// them. The calls wait in gRPC's queues: resets on one connection grow a
// member until the kernel kills it (bench/RESULTS.md, "Measurements moved from headers"). gRPC 1.51 has no setting that bounds this (max concurrent
// streams does not count a reset stream, nor does a resource quota), so
// this guard sees what every HTTP/2 client of a client or peer URL sends
// before gRPC does, and what gRPC answers: in the TLS pump
// (net/tls_pump.h), and for plaintext inside gRPC's own reads and writes
// (net/grpc_fd_guard.h).
//
// Resets: each RST_STREAM frame on a stream the server has not answered
// yet (sent no HEADERS on) takes a token from the connection's bucket and
// one from the bucket all connections share (Shared). A reset of an
// answered stream is free: gRPC runs its call already, and clients end
// streams that way all the time (clientv3's LeaseKeepAliveOnce and
// canceled watches; etcd's lease-keepalive benchmark resets thousands of
// streams a second).
//
// Resets the server sends: a client can make the server reset its streams
// (frames gRPC answers with RST_STREAM, such as DATA after END_STREAM:
// "MadeYouReset", CVE-2025-8671), which costs gRPC the same. Each
// RST_STREAM the server sends on a stream it never answered is charged to
// the same buckets (they may go into debt).
//
// Abandoned streams: a client can also open streams and close the
// connection (gRPC cancels all its calls at once, as for resets). The
// streams a connection leaves unanswered when it closes are charged to the
// shared bucket alike (an attack of many connections doing so grew a
// member by gigabytes before).
//
// New streams: while the connection's or the shared bucket is in debt, or
// kMaxUnanswered streams of all connections wait for an answer, a new
// stream waits; but a connection that reset few unanswered streams lately
// (kResetsForgiven), has fewer than kUnansweredUnderPressure streams
// unanswered and fewer than kStaleInDebt of them stale goes on, so a
// well-behaved client is not held up by what others did. While only the
// shared bucket is in debt, streams the client sent whole count against
// kUnansweredUnderPressure only once the server kept them kStaleAfter: a
// busy client's hundreds of calls in flight are sent whole and answered
// within milliseconds, and must not be held (on plaintext: closed) because
// another connection abandoned thousands of streams (that attack cut a
// 100-client benchmark connection off: 4,356-13,109 of 20,000 puts
// failed; none now, as with etcd). Its
// own debt, and kMaxUnanswered of all connections, still bound it as
// before; and at most kWholeInFlightUnderPressure plus the streams the
// server answered on it in the last second or so (an attacker's Watch
// streams sent whole are never answered). A stale stream
// is one the client left: not sent whole (no END_STREAM) and no frame of
// it for kStaleAfter. A busy client's calls in flight are sent whole (a
// unary call ends its request with END_STREAM) or are still being sent,
// so up to kUnansweredUnderPressure of them go on; what an attacker opens
// and leaves, to cost gRPC memory, turns stale within kStaleAfter, and a
// connection never holds more than kUnansweredUnderPressure unanswered
// while kMaxUnanswered wait (unless the server answered more of its
// streams in the last second or so), nor more than kWholeInFlightUnderPressure
// plus its recent answers while only the shared bucket is in debt
// (streams sent whole that the server leaves unanswered, such as a Watch
// ended before its first request, count there). Past
// twice kMaxUnanswered, a connection goes on only with fewer than
// kStaleInDebt unanswered, so many connections of 63 each stay bounded
// (thousands of such connections grew a member by gigabytes). Before,
// a busy plaintext client with five calls in flight was cut off while
// another client kept the shared bucket in debt.
//
// Waiting: a frame that must wait is held with everything after it. The
// TLS pump stops reading that connection until it is due (TCP's flow
// control stops the client); a plaintext connection is closed instead
// (gRPC's reads cannot be paused: net/grpc_fd_guard.h). So unanswered
// resets and abandoned streams reach gRPC at a rate it keeps up with,
// however many connections send them. The buckets' sizes are kConnBurst
// and kConnPerSecond, kThreadBurst and kThreadPerSecond below (nghttp2's
// rapid-reset defaults are 1000 and 33 a second a connection).
//
// Streams past the cap: a connection has at most kMaxConcurrentStreams
// streams open (opened by the client and not yet ended by the server's
// END_STREAM or a reset either way; reset or abandoned ones are paced as
// above). A new stream past that is refused as Go's http2 server refuses
// one past its MaxConcurrentStreams: RST_STREAM(REFUSED_STREAM) to the
// client, which may retry it (clients treat it as never processed), and
// gRPC never sees it as a stream. gRPC cannot be asked to do that: past
// its own limit gRPC 1.51 closes the whole connection, and a client that
// honours the limit it advertises queues its calls past it, so a plain Put
// after 4,096 watches on one connection waited out its deadline (issue
// #36). So the client server advertises no limit (as etcd, whose
// --max-concurrent-streams defaults to math.MaxUint32) and this guard
// enforces one. How: the HEADERS frame still reaches gRPC, since its
// header block changes the connection's HPACK table, but with the stream
// id's lowest bit cleared: an even id, which a server never accepts as a
// stream from a client, so gRPC decodes the block and drops it (chttp2
// parsing.cc, "non-client generated index"). Later frames of the refused
// stream reach gRPC as frames of a closed stream (DATA counts for the
// connection's flow control, and is dropped). The RST_STREAM frames the
// guard owes the client wait in replies(): its caller sends them when the
// server's own output is between frames. A stream past the cap whose
// header block goes on in CONTINUATION frames closes the connection
// instead (gRPC 1.51 fails on such a block once dropped, and would close
// it anyway).
//
// It also refuses a client that opens more than kStreamsBeforeSettingsAck
// streams before it acknowledged the server's SETTINGS: gRPC enforces its
// limit on concurrent streams (server/server.h kMaxConcurrentStreams) only
// once the client acknowledged it, so a client that never does could keep
// any number of streams open, and grow the member with them. Every HTTP/2
// client acknowledges at once (RFC 9113 section 6.5.3); a refused
// connection is closed.
//
// Framing (RFC 9113 section 4.1): the client's 24-byte connection preface,
// then frames of a 9-byte header (length 24 bits, type, flags, stream id)
// and `length` bytes of payload. The guard reads headers only and skips
// payloads; it judges nothing else (gRPC answers malformed frames).
//
// Thread-safety: a guard is not thread-safe (one a connection: its pump
// thread, or a mutex of net/grpc_fd_guard.h); its shared bucket is.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace etcdq::net {

// Tokens that come back at `per_second`, at most `burst` saved up.
// Thread-safe (one bucket may be shared by the guards of many threads).
class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  TokenBucket(double burst, double per_second) : burst_(burst), per_second_(per_second), tokens_(burst) {}
  // Takes one token if there is one.
  bool take(Clock::time_point now);
  // Takes one token even if there is none: the bucket goes into debt, by
  // at most `burst`.
  void charge(Clock::time_point now, double tokens = 1);
  // When the bucket is out of debt (now if it is not in debt).
  Clock::time_point paid_at(Clock::time_point now);
  // Whether more than `tokens` are missing from a full bucket (taken and
  // not yet refilled).
  bool spent_since_full(Clock::time_point now, double tokens);
  // Gives back one token taken by take() (capped at the burst).
  void give_back();
  // When the next token is due (now if there is one).
  Clock::time_point next_token(Clock::time_point now);

 private:
  void refill(Clock::time_point now);  // mu_ held
  std::mutex mu_;
  double burst_, per_second_, tokens_;
  Clock::time_point last_{};
};

class H2Guard {
 public:
  using Clock = TokenBucket::Clock;
  static constexpr size_t kPrefaceBytes = 24;
  static constexpr size_t kFrameHeaderBytes = 9;
  static constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4;
  static constexpr uint8_t kAckFlag = 0x1, kEndStreamFlag = 0x1, kEndHeadersFlag = 0x4;
  static constexpr uint32_t kRefusedStreamCode = 0x7;  // RFC 9113 section 7
  // Streams one connection may have open at once (see above). The peer
  // server advertises the same number (server/server.h), so a member's
  // own calls queue in its client instead of being refused.
  static constexpr size_t kMaxConcurrentStreams = 4096;
  // Refusals not yet sent (RST_STREAM frames, 13 bytes each); a client that
  // opens streams past the cap faster than it reads what the server sends
  // is refused (the connection closed).
  static constexpr size_t kMaxRepliesBytes = 1024 * 13;
  // Streams remembered as answered and not ended; past it, resets of
  // further answered streams take tokens (gRPC allows 4096 open at once).
  static constexpr size_t kMaxAnswered = 8192;
  static constexpr uint64_t kStreamsBeforeSettingsAck = 1000;
  static constexpr double kConnBurst = 1000, kConnPerSecond = 100;
  static constexpr double kThreadBurst = 2000, kThreadPerSecond = 1000;  // the shared bucket
  // Streams opened and not yet answered, all connections together.
  static constexpr int64_t kMaxUnanswered = 10000;
  // While the shared bucket is in debt, or kMaxUnanswered streams wait, a
  // connection may still have this many unanswered at once, of which fewer
  // than kStaleInDebt stale (no frame from the client for kStaleAfter and
  // not sent whole) ...
  static constexpr size_t kUnansweredUnderPressure = 64;
  static constexpr size_t kStaleInDebt = 4;
  static constexpr std::chrono::milliseconds kStaleAfter{1000};
  // ... and that has not reset more than this many unanswered streams
  // lately (its own bucket is this close to full: a client's occasional
  // timed-out call does not count against it for long).
  static constexpr double kResetsForgiven = 10;
  // While only the shared bucket is in debt, a connection may have this
  // many streams unanswered that it sent whole and the server has had for
  // less than kStaleAfter, plus as many as the server answered on it in
  // the last kStaleAfter or so: a busy client's calls in flight (answered
  // in milliseconds), not an attacker's never-answered Watch streams.
  static constexpr size_t kWholeInFlightUnderPressure = 256;

  // What every guard of the process shares: the bucket unanswered resets
  // and abandoned streams take from, and the count of streams opened and
  // not yet answered. Thread-safe.
  struct Shared {
    Shared(double burst = kThreadBurst, double per_second = kThreadPerSecond, int64_t max_unanswered = kMaxUnanswered)
        : resets(burst, per_second), max_unanswered(max_unanswered) {}
    TokenBucket resets;
    std::atomic<int64_t> unanswered{0};
    const int64_t max_unanswered;
  };
  // The process's (client and peer URLs, TLS and plaintext alike).
  static Shared* process_shared();

  explicit H2Guard(Shared* shared) : shared_(shared), thread_(&shared->resets) {}
  // The streams still unanswered were abandoned (the connection closed):
  // gRPC cancels each, as for a reset, so each is charged to the shared
  // bucket.
  ~H2Guard();
  H2Guard(const H2Guard&) = delete;
  H2Guard& operator=(const H2Guard&) = delete;

  // How many of the next `n` bytes the client sent (from the connection's
  // first byte on) may go to the server now. Fewer than `n` when a
  // RST_STREAM frame has no token: its header's last byte and what follows
  // wait, and *resume_at says when to offer them again. Fewer, and
  // refused() true, when the connection must be closed.
  // (A held frame may have its payload partly passed only when offered
  // again; a frame's payload is never inspected.) The header of a stream it
  // refuses is rewritten in `data` (its stream id made even, see above)
  // and a RST_STREAM for it joins replies().
  size_t admit(char* data, size_t n, Clock::time_point now, Clock::time_point* resume_at);
  // The next `n` bytes the server sent to the client (from its first
  // byte): which streams it answered and ended, and its RST_STREAM frames
  // on streams it never answered, charged to the buckets.
  void server_sent(const char* data, size_t n, Clock::time_point now);

  // Frames the guard owes the client (RST_STREAM(REFUSED_STREAM) for each
  // stream refused past the cap), in order. The caller writes them to the
  // client only when server_between_frames() or replies_mid_frame(), and
  // then nothing of the server's until !replies_mid_frame(); replies_sent()
  // counts what was written.
  std::string_view replies() const { return std::string_view(replies_).substr(replies_off_); }
  void replies_sent(size_t n);
  // Everything the server sent so far (server_sent()) ends with a whole
  // frame: a reply may go in now.
  bool server_between_frames() const { return out_header_len_ == 0 && out_payload_left_ == 0; }
  // Part of a reply frame was written: the rest must follow before
  // anything of the server's.
  bool replies_mid_frame() const { return replies_off_ % kReplyFrameBytes != 0; }
  uint64_t refused_streams() const { return refused_streams_; }

  // The client opened kStreamsBeforeSettingsAck streams without having
  // acknowledged the server's SETTINGS, owes kMaxRepliesBytes of
  // refusals, or opened a stream past the cap with a header block in
  // CONTINUATION frames: close the connection.
  bool refused() const { return refused_; }
  uint64_t resets() const { return resets_; }  // unanswered RST_STREAM frames let through
  uint64_t holds() const { return holds_; }    // times admit() held a frame
  uint64_t server_resets() const { return server_resets_; }
  size_t unanswered() const { return unanswered_.size(); }
  // Of those, the ones the client left at `now` (see kStaleAfter).
  size_t stale(Clock::time_point now) const;
  // Why admit() last stopped short (for logs).
  const char* why() const { return why_; }

 private:
  Shared* shared_;
  TokenBucket* thread_;  // shared_->resets
  // Streams the client opened that the server has not answered (sent
  // HEADERS on) nor either side reset: gRPC's calls for them may not run
  // yet. With whether the client finished sending it (END_STREAM) and
  // when it last sent a frame of it.
  struct Pending {
    bool whole = false;
    Clock::time_point last;
  };
  std::unordered_map<uint32_t, Pending> unanswered_;
  size_t not_whole_ = 0;  // of unanswered_, the ones not sent whole
  // Drops `stream` from unanswered_ (the server answered it or either side
  // reset it), if it is there.
  bool drop_unanswered(uint32_t stream);  // false if it was not there
  // Streams of this connection the server answered in the last kStaleAfter
  // or so (this window and the one before).
  size_t recent_answers(Clock::time_point now);
  Clock::time_point answers_since_{};
  size_t answers_now_ = 0, answers_before_ = 0;
  // Under pressure: whether this connection's streams may go on (see "New
  // streams" above), with `fresh_whole` unanswered beyond its recent answers.
  bool answering(Clock::time_point now, size_t fresh_whole);
  static constexpr std::chrono::milliseconds kRecountEvery{10};
  Clock::time_point counted_at_{};
  size_t counted_stale_ = 0, counted_old_whole_ = 0;
  const char* why_ = "";
  TokenBucket conn_{kConnBurst, kConnPerSecond};
  size_t preface_left_ = kPrefaceBytes;
  uint8_t header_[kFrameHeaderBytes] = {};
  size_t header_len_ = 0;
  uint64_t payload_left_ = 0;
  uint64_t resets_ = 0, holds_ = 0, server_resets_ = 0;
  // The server's side: its frame header in progress and payload to skip.
  uint8_t out_header_[kFrameHeaderBytes] = {};
  size_t out_header_len_ = 0;
  uint64_t out_payload_left_ = 0;
  // Streams the server sent HEADERS on and has not ended (nor either side
  // reset), at most kMaxAnswered.
  std::unordered_set<uint32_t> answered_;
  // The last kRecentlyEnded streams the server ended (END_STREAM): a reset
  // right after (gRPC's own, or a client's that crossed the answer) is
  // free too. A ring; 0 is no stream.
  static constexpr size_t kRecentlyEnded = 256;
  std::array<uint32_t, kRecentlyEnded> ended_{};
  size_t ended_next_ = 0;
  // Forgets `stream` as answered or recently ended; false if it was neither.
  bool forget_answered(uint32_t stream);
  uint64_t headers_ = 0;  // HEADERS frames, counted until the first SETTINGS ack
  bool settings_acked_ = false, refused_ = false;
  // Refusing a stream past the cap (see above). The highest stream the
  // client opened (a new stream's id is higher than every earlier one,
  // RFC 9113 section 5.1.1).
  uint32_t highest_opened_ = 0;
  // The last kRecentlyRefused streams refused: a client's reset of one is
  // free (gRPC never saw the stream). A ring; 0 is no stream.
  static constexpr size_t kRecentlyRefused = 64;
  std::array<uint32_t, kRecentlyRefused> refused_ids_{};
  size_t refused_next_ = 0;
  uint64_t refused_streams_ = 0;
  static constexpr size_t kReplyFrameBytes = kFrameHeaderBytes + 4;
  std::string replies_;
  size_t replies_off_ = 0;
  // Refuses the new stream whose header's last byte is data[i].
  void refuse_stream(uint32_t stream, char* last_byte);
};

}  // namespace etcdq::net
