#include "net/h2_guard.h"

#include <algorithm>

namespace etcdq::net {

void TokenBucket::refill(Clock::time_point now) {
  if (last_ == Clock::time_point{}) last_ = now;
  if (now <= last_) return;
  double seconds = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + seconds * per_second_);
  last_ = now;
}

bool TokenBucket::take(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  refill(now);
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

void TokenBucket::charge(Clock::time_point now, double tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  refill(now);
  tokens_ = std::max(-burst_, tokens_ - tokens);
}

TokenBucket::Clock::time_point TokenBucket::paid_at(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  refill(now);
  if (tokens_ >= 0) return now;
  return now + std::chrono::ceil<Clock::duration>(std::chrono::duration<double>(-tokens_ / per_second_));
}

bool TokenBucket::spent_since_full(Clock::time_point now, double tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  refill(now);
  return tokens_ < burst_ - tokens;
}

void TokenBucket::give_back() {
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = std::min(burst_, tokens_ + 1);
}

TokenBucket::Clock::time_point TokenBucket::next_token(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  refill(now);
  if (tokens_ >= 1) return now;
  auto wait = std::chrono::duration<double>((1 - tokens_) / per_second_);
  return now + std::chrono::ceil<Clock::duration>(wait);
}

namespace {
// The stream id of a frame header whose first 8 bytes are `h` and whose
// last is `last` (RFC 9113 section 4.1: 31 bits, big-endian).
uint32_t stream_of(const uint8_t* h, uint8_t last) {
  return (uint32_t{h[5] & 0x7fu} << 24) | (uint32_t{h[6]} << 16) | (uint32_t{h[7]} << 8) | last;
}
}  // namespace

H2Guard::Shared* H2Guard::process_shared() {
  static Shared shared;
  return &shared;
}

H2Guard::~H2Guard() {
  if (unanswered_.empty()) return;
  thread_->charge(Clock::now(), static_cast<double>(unanswered_.size()));
  shared_->unanswered.fetch_sub(static_cast<int64_t>(unanswered_.size()));
}

size_t H2Guard::admit(char* data, size_t n, Clock::time_point now, Clock::time_point* resume_at) {
  if (refused_) return 0;
  size_t i = 0;
  while (i < n) {
    if (preface_left_ > 0) {
      size_t k = std::min(preface_left_, n - i);
      preface_left_ -= k;
      i += k;
      continue;
    }
    if (payload_left_ > 0) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(payload_left_, n - i));
      payload_left_ -= k;
      i += k;
      continue;
    }
    // A frame header's last byte completes it: a frame that must wait
    // waits there, so nothing of it past that reaches the server.
    if (header_len_ == kFrameHeaderBytes - 1) {
      uint8_t type = header_[3];
      uint32_t stream = stream_of(header_, static_cast<uint8_t>(data[i]));
      bool opens = type == kHeaders && stream > highest_opened_ && (stream & 1) != 0;
      if (opens && answered_.size() + unanswered_.size() >= kMaxConcurrentStreams) {
        if ((header_[4] & kEndHeadersFlag) == 0) {
          // gRPC 1.51 cannot drop a header block that goes on in
          // CONTINUATION frames (its skip parser fails on them and closes
          // the connection): close it here. Clients split a block only
          // past 16 KiB of metadata.
          why_ = "it opened a stream past the limit with a header block in CONTINUATION frames";
          refused_ = true;
          return i;
        }
        if (replies_.size() - replies_off_ + kReplyFrameBytes > kMaxRepliesBytes) {
          why_ = "it opens streams past the limit faster than it reads the server's refusals";
          refused_ = true;
          return i;
        }
        refuse_stream(stream, &data[i]);
      } else if (type == kRstStream && stream != 0 &&
                 std::find(refused_ids_.begin(), refused_ids_.end(), stream) != refused_ids_.end()) {
        // gRPC never saw the stream: nothing to pay for.
      } else if (type == kRstStream && !forget_answered(stream)) {
        // A stream the server has not answered: gRPC may not have
        // started its call, and cancels it on its own threads.
        why_ = "it resets streams faster than the server answers them (HTTP/2 rapid reset)";
        if (!conn_.take(now)) {
          *resume_at = conn_.next_token(now);
          ++holds_;
          return i;
        }
        if (!thread_->take(now)) {
          conn_.give_back();
          *resume_at = thread_->next_token(now);
          ++holds_;
          return i;
        }
        ++resets_;
        drop_unanswered(stream);
      } else if (opens) {
        // (HEADERS on a stream id at or below one opened before is no new
        // stream: trailers, or one gRPC drops as out of order.)
        // A new stream. Streams reset or abandoned unanswered (by anyone)
        // are still being paid for: wait.
        // A connection that has nothing of its own to pay for, and only a
        // few streams waiting, goes on: a well-behaved client is not
        // held up by what others did.
        auto paid = conn_.paid_at(now);
        // Only asked for under pressure: it walks this connection's
        // unanswered streams (fewer than kUnansweredUnderPressure then).
        auto few = [&] {
          return !conn_.spent_since_full(now, kResetsForgiven) && unanswered_.size() < kUnansweredUnderPressure &&
                 stale(now) < kStaleInDebt;
        };
        if (paid <= now) {
          auto shared_paid = thread_->paid_at(now);
          if (shared_paid > now && !answering(now, kWholeInFlightUnderPressure)) paid = shared_paid;
        }
        if (paid > now) {
          why_ = "streams were reset or abandoned before the server answered them (HTTP/2 rapid reset)";
          *resume_at = paid;
          ++holds_;
          return i;
        }
        if (!settings_acked_ && ++headers_ > kStreamsBeforeSettingsAck) {
          why_ = "it opened too many streams without acknowledging the server's HTTP/2 settings";
          refused_ = true;
          return i;
        }
        int64_t waiting = shared_->unanswered.load();
        // Past twice the bound, the allowance is the few streams of any
        // client with one call at a time: many connections of 63 each must
        // not add up without bound.
        bool over_hard = waiting >= 2 * shared_->max_unanswered && unanswered_.size() >= kStaleInDebt;
        // Past the bound, a connection the server answers as fast as it
        // has calls in flight goes on too (a busy client, not one whose
        // streams wait: answering() with no allowance for fresh ones).
        if ((waiting >= shared_->max_unanswered && !few() && !answering(now, 0)) || over_hard) {
          why_ = "too many streams wait for an answer, on all connections together";
          *resume_at = now + std::chrono::milliseconds(5);
          ++holds_;
          return i;
        }
        bool whole = (header_[4] & kEndStreamFlag) != 0;
        unanswered_[stream] = Pending{whole, now};
        if (!whole) ++not_whole_;
        shared_->unanswered.fetch_add(1);
        highest_opened_ = stream;
      } else if (stream != 0 && !unanswered_.empty()) {
        // The client is still sending an unanswered stream (or finished
        // it: END_STREAM, and it now waits on the server).
        auto it = unanswered_.find(stream);
        if (it != unanswered_.end()) {
          it->second.last = now;
          if ((type == kHeaders || type == kData) && (header_[4] & kEndStreamFlag) && !it->second.whole) {
            it->second.whole = true;
            --not_whole_;
          }
        }
      }
    }
    header_[header_len_++] = static_cast<uint8_t>(data[i++]);
    if (header_len_ == kFrameHeaderBytes) {
      payload_left_ = (uint64_t{header_[0]} << 16) | (uint64_t{header_[1]} << 8) | header_[2];
      if (header_[3] == kSettings && (header_[4] & kAckFlag)) settings_acked_ = true;
      header_len_ = 0;
    }
  }
  return n;
}

void H2Guard::refuse_stream(uint32_t stream, char* last_byte) {
  // An even id: gRPC decodes the header block and drops it (see the header).
  *last_byte = static_cast<char>(*last_byte & ~1);
  highest_opened_ = stream;
  refused_ids_[refused_next_] = stream;
  refused_next_ = (refused_next_ + 1) % kRecentlyRefused;
  ++refused_streams_;
  if (replies_off_ > 0) {
    replies_.erase(0, replies_off_);
    replies_off_ = 0;
  }
  const uint8_t frame[kReplyFrameBytes] = {0, 0, 4, kRstStream, 0,
                                           static_cast<uint8_t>((stream >> 24) & 0x7f),
                                           static_cast<uint8_t>(stream >> 16),
                                           static_cast<uint8_t>(stream >> 8),
                                           static_cast<uint8_t>(stream),
                                           0, 0, 0, static_cast<uint8_t>(kRefusedStreamCode)};
  replies_.append(reinterpret_cast<const char*>(frame), sizeof frame);
}

void H2Guard::replies_sent(size_t n) {
  replies_off_ = std::min(replies_.size(), replies_off_ + n);
  if (replies_off_ == replies_.size()) {
    replies_.clear();
    replies_off_ = 0;
  }
}

size_t H2Guard::stale(Clock::time_point now) const {
  size_t n = 0;
  for (const auto& [id, p] : unanswered_) {
    if (!p.whole && now - p.last >= kStaleAfter) ++n;
  }
  return n;
}

bool H2Guard::drop_unanswered(uint32_t stream) {
  auto it = unanswered_.find(stream);
  if (it == unanswered_.end()) return false;
  if (!it->second.whole) --not_whole_;
  unanswered_.erase(it);
  shared_->unanswered.fetch_sub(1);
  return true;
}

size_t H2Guard::recent_answers(Clock::time_point now) {
  if (now - answers_since_ >= kStaleAfter || now < answers_since_) {
    // A new window: the last one's count if it just ended, else nothing.
    answers_before_ = now - answers_since_ < 2 * kStaleAfter && now >= answers_since_ ? answers_now_ : 0;
    answers_now_ = 0;
    answers_since_ = now;
  }
  return answers_before_ + answers_now_;
}

bool H2Guard::answering(Clock::time_point now, size_t fresh_whole) {
  if (conn_.spent_since_full(now, kResetsForgiven)) return false;
  // Cheap first: streams the client has not sent whole count at once.
  if (not_whole_ >= kUnansweredUnderPressure) return false;
  if (unanswered_.size() < kUnansweredUnderPressure) return stale(now) < kStaleInDebt;
  // Many unanswered, most sent whole: count the stale ones and the whole
  // ones the server has kept for kStaleAfter. The walk is done at most
  // once every kRecountEvery (a new stream is fresh, and an answer only
  // lowers the counts, so the counts are at most that much behind).
  if (now - counted_at_ >= kRecountEvery || now < counted_at_) {
    counted_stale_ = 0;
    counted_old_whole_ = 0;
    for (const auto& [id, p] : unanswered_) {
      if (now - p.last < kStaleAfter) continue;
      if (p.whole) {
        ++counted_old_whole_;
      } else {
        ++counted_stale_;
      }
    }
    counted_at_ = now;
  }
  return counted_stale_ < kStaleInDebt && not_whole_ + counted_old_whole_ < kUnansweredUnderPressure &&
         unanswered_.size() < fresh_whole + recent_answers(now);
}

bool H2Guard::forget_answered(uint32_t stream) {
  if (stream == 0) return false;
  if (answered_.erase(stream) > 0) return true;
  auto it = std::find(ended_.begin(), ended_.end(), stream);
  if (it == ended_.end()) return false;
  *it = 0;
  return true;
}

void H2Guard::server_sent(const char* data, size_t n, Clock::time_point now) {
  size_t i = 0;
  while (i < n) {
    if (out_payload_left_ > 0) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(out_payload_left_, n - i));
      out_payload_left_ -= k;
      i += k;
      continue;
    }
    out_header_[out_header_len_++] = static_cast<uint8_t>(data[i++]);
    if (out_header_len_ < kFrameHeaderBytes) continue;
    out_header_len_ = 0;
    out_payload_left_ = (uint64_t{out_header_[0]} << 16) | (uint64_t{out_header_[1]} << 8) | out_header_[2];
    uint8_t type = out_header_[3];
    uint32_t stream = stream_of(out_header_, out_header_[8]);
    bool end_stream = (type == kHeaders || type == kData) && (out_header_[4] & kEndStreamFlag);
    if (type == kHeaders || type == kRstStream) {
      if (drop_unanswered(stream) && type == kHeaders) {
        recent_answers(now);
        ++answers_now_;
      }
    }
    if (type == kRstStream) {
      // The server ending a stream it answered is a normal end (gRPC
      // resets a stream it finished before the client did); resetting
      // one it never answered is what a client's bad frame makes it do.
      if (!forget_answered(stream)) {
        conn_.charge(now);
        thread_->charge(now);
        ++server_resets_;
      }
    } else if (end_stream) {
      answered_.erase(stream);
      ended_[ended_next_] = stream;
      ended_next_ = (ended_next_ + 1) % kRecentlyEnded;
    } else if (type == kHeaders && stream != 0 && answered_.size() < kMaxAnswered) {
      answered_.insert(stream);
    }
  }
}

}  // namespace etcdq::net
