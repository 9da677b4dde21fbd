// Holds the answers to an applied entry's proposals until the watch streams
// that took the entry's events have written them, so a watcher gets a put's
// event before the writer gets its answer — etcd's order: its apply
// goroutine hands the events to the watch streams (notify, in the write's
// End) before it wakes the put's handler. Without this, a put's answer
// usually left before its events, and etcd's `benchmark watch-latency`,
// which times each watcher from the put's answer, showed etcdq slower than
// etcd (issue #16; the numbers: bench/RESULTS.md, "Measurements moved from headers").
//
// How: while the apply thread runs an entry, each watch stream that queues
// events notes (its Track, the seq of its last queued response)
// (note(), thread-local, no lock). After the entry, consensus::Node routes its
// answers here (hold()): they wait until every noted stream has written
// past its seq (Track::written()), or the stream closed — or kMaxHold
// passed, whatever a stream does. A stream is not noted when its write
// has been in flight longer than kStalledWrite (a client that stops
// reading fills its HTTP/2 window and that write never finishes) or when
// more than kMaxQueuedToWait bytes wait behind it (a client that reads
// more slowly than its events come): neither holds anyone's answers
// (test_watch_isolation.py). A stream that turns stuck after it was noted
// holds that entry's answers for at most kMaxHold.
//
// Answers released here run on the gate's own threads (the node runs the
// others: consensus/node.h, set_answer_route); after drain(), on whichever thread
// releases them. An entry's answers may so go out up to kMaxHold after a
// later entry's, which were not held: those operations overlapped, so
// any order is linearizable.
//
// The member owns one gate and routes its node's answers through it for
// the node's whole life (member.cc); watch streams (server/watch_stream.cc)
// note what they queued and report what they wrote through their Track.
//
// Thread-safety: note() and hold() on the apply (consensus) thread; a
// Track's written()/close() from any thread; the gate from any thread.
// Track and Held locks are leaves: nothing else is locked under them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace etcdq::member {

class AnswerGate {
 public:
  using Clock = std::chrono::steady_clock;
  // The longest an answer waits for watch writes. Short on purpose: it
  // orders events before answers while delivery keeps up (a write takes
  // well under a millisecond then), but does not throttle puts when it
  // does not: a longer hold throttled the watch fan-out at full write
  // speed (bench/RESULTS.md, "Measurements moved from headers").
  static constexpr std::chrono::milliseconds kMaxHold{3};
  // A stream whose write has been in flight this long is not waited for.
  static constexpr std::chrono::milliseconds kStalledWrite{5};
  // Nor one with more than this queued behind the write in flight.
  static constexpr size_t kMaxQueuedToWait = 64 << 10;
  static constexpr int kThreads = 2;

  struct Held;
  struct Core;

  // One watch stream's written position. Shared by the stream and the
  // answers waiting on it, so either may go first.
  class Track {
   public:
    // Every response with seq < `below` is written: releases what waited
    // for them. Any thread, no stream lock held.
    void written(uint64_t below);
    // The stream ends (or drops its queue): nothing it holds is waited for.
    void close();
    // How many entries' answers it keeps a hold on (released ones
    // included, until the next hold() drops them). Any thread.
    size_t waiting();

   private:
    friend class AnswerGate;
    // The apply thread's own (note()): the entry this stream was last
    // noted in, and where in that entry's notes.
    uint64_t noted_entry_ = 0;
    size_t noted_slot_ = 0;
    std::mutex mu_;
    uint64_t below_ = 0;
    bool closed_ = false;
    std::deque<std::pair<uint64_t, std::shared_ptr<Held>>> waiting_;  // seq ascending
  };

  // `max_hold`: kMaxHold but in tests.
  explicit AnswerGate(std::chrono::milliseconds max_hold = kMaxHold);
  ~AnswerGate();  // drain(), then joins its threads

  // Answers everything held and queued, on this thread, before it
  // returns; from then on held answers run as soon as they are released,
  // on the releasing thread, and hold() answers at once. The node calls it
  // when it stops (consensus::Node::set_answer_route), so that every proposal
  // is answered by the time Node::stop() returns.
  void drain();

  // Apply thread, from a stream that just queued events (its lock may be
  // held): the entry being applied waits until `t` wrote `seq`. Does
  // nothing outside an entry's apply.
  static void note(const std::shared_ptr<Track>& t, uint64_t seq);

  // Apply thread, after each applied entry (consensus::Node's answer route):
  // takes `answers` (true) to run once the streams noted during the entry
  // have written their events, or leaves it (false, untouched) when none
  // need waiting for. `answers` may be empty (an entry with no answers of
  // this member): the entry's notes are dropped, false.
  bool hold(std::function<void()>& answers);

 private:
  void run();

  const std::chrono::milliseconds max_hold_;
  std::shared_ptr<Core> core_;
  std::vector<std::thread> threads_;
};

}  // namespace etcdq::member
