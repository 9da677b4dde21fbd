// AnswerGate's rules (member/answer_gate.h): an entry's answers wait for the
// watch streams that took its events, and for nothing else.
#include "member/answer_gate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace {

using etcdq::member::AnswerGate;
using Track = AnswerGate::Track;
using TrackPtr = std::shared_ptr<Track>;
using namespace std::chrono_literals;

// Released by writes only: no deadline comes within a test.
constexpr std::chrono::milliseconds kLong = std::chrono::hours(1);

// An entry's answers: a task that fulfils a promise, and the future to wait on.
struct Answer {
  std::promise<std::thread::id> ran;
  std::future<std::thread::id> done = ran.get_future();
  bool ran_within(std::chrono::milliseconds d) { return done.wait_for(d) == std::future_status::ready; }
  bool ran_here() { return ran_within(0ms) && done.get() == std::this_thread::get_id(); }
};

// One entry as the apply thread runs it: the streams it fed note their
// seqs, then the node offers the entry's answers. Returns hold()'s answer;
// when the gate leaves the answers, they run here, as the node's
// completion threads would run them.
bool apply_entry(AnswerGate& gate, const std::vector<std::pair<TrackPtr, uint64_t>>& notes, Answer& a) {
  std::function<void()> none;
  gate.hold(none);  // this thread collects from now on, as the apply thread does
  for (const auto& [t, seq] : notes) AnswerGate::note(t, seq);
  std::function<void()> task = [&a] { a.ran.set_value(std::this_thread::get_id()); };
  if (gate.hold(task)) return true;
  EXPECT_TRUE(task);  // left untouched for the caller
  task();
  return false;
}

TEST(AnswerGate, WithoutNotesTheAnswersAreLeftToTheCaller) {
  AnswerGate gate(kLong);
  Answer a;
  EXPECT_FALSE(apply_entry(gate, {}, a));
  EXPECT_TRUE(a.ran_here());
}

TEST(AnswerGate, AnswersWaitUntilTheNotedStreamWroteItsSeq) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  Answer a;
  ASSERT_TRUE(apply_entry(gate, {{t, 5}}, a));
  t->written(5);  // seq 5 is the next to write: not yet
  EXPECT_FALSE(a.ran_within(20ms));
  t->written(6);  // everything before 6 is written
  ASSERT_TRUE(a.ran_within(1s));
  EXPECT_NE(a.done.get(), std::this_thread::get_id());  // on the gate's threads
}

TEST(AnswerGate, WhatIsWrittenAlreadyHoldsNothing) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  t->written(10);
  Answer a;
  EXPECT_FALSE(apply_entry(gate, {{t, 9}}, a));
  EXPECT_TRUE(a.ran_here());
}

TEST(AnswerGate, EveryNotedStreamMustHaveWritten) {
  AnswerGate gate(kLong);
  auto t1 = std::make_shared<Track>();
  auto t2 = std::make_shared<Track>();
  Answer a;
  // The same stream twice (two of its watchers): its last seq counts.
  ASSERT_TRUE(apply_entry(gate, {{t1, 0}, {t2, 3}, {t2, 4}}, a));
  t1->written(1);
  t2->written(4);
  EXPECT_FALSE(a.ran_within(20ms));
  t2->written(5);
  EXPECT_TRUE(a.ran_within(1s));
}

TEST(AnswerGate, AClosedStreamHoldsNothing) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  Answer a;
  ASSERT_TRUE(apply_entry(gate, {{t, 0}}, a));
  EXPECT_FALSE(a.ran_within(20ms));
  t->close();
  EXPECT_TRUE(a.ran_within(1s));
  // Closed before the entry's answers come: nothing to wait for.
  Answer b;
  EXPECT_FALSE(apply_entry(gate, {{t, 1}}, b));
}

TEST(AnswerGate, AStreamThatNeverWritesHoldsAnAnswerAtMostMaxHold) {
  AnswerGate gate;
  auto t = std::make_shared<Track>();
  Answer a;
  auto start = AnswerGate::Clock::now();
  ASSERT_TRUE(apply_entry(gate, {{t, 0}}, a));
  ASSERT_TRUE(a.ran_within(2s));
  EXPECT_GE(AnswerGate::Clock::now() - start, AnswerGate::kMaxHold);
  t->written(1);  // late: changes nothing, runs nothing twice
}

TEST(AnswerGate, AnEntryWithoutAnswersDropsItsNotes) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  AnswerGate::note(t, 0);
  EXPECT_FALSE(gate.hold(none));  // a follower's entry, or one of others' proposals
  std::function<void()> task = [] {};
  EXPECT_FALSE(gate.hold(task));  // the next entry noted nothing
}

TEST(AnswerGate, OnlyTheApplyThreadCollects) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  // A stream fed from another thread (catch-up, progress) notes nothing.
  std::thread([&] { AnswerGate::note(t, 0); }).join();
  std::function<void()> task = [] {};
  EXPECT_FALSE(gate.hold(task));
}

TEST(AnswerGate, TheGateAnswersWhatItHoldsWhenItGoes) {
  Answer a;
  auto t = std::make_shared<Track>();
  {
    AnswerGate gate(kLong);
    ASSERT_TRUE(apply_entry(gate, {{t, 0}}, a));
  }
  EXPECT_TRUE(a.ran_within(0ms));
  t->written(1);  // the stream outlives the gate: nothing runs twice
}

TEST(AnswerGate, DrainAnswersEverythingHereAndThenHoldsNothing) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  Answer a;
  ASSERT_TRUE(apply_entry(gate, {{t, 0}}, a));
  gate.drain();  // Node::stop(): every proposal answered when it returns
  EXPECT_TRUE(a.ran_here());
  // Held after the drain: answered at once, here.
  Answer b;
  EXPECT_TRUE(apply_entry(gate, {{t, 1}}, b));
  EXPECT_TRUE(b.ran_here());
  t->written(2);  // nothing runs twice
}

TEST(AnswerGate, AStalledStreamPinsNothingOnceItsAnswersWent) {
  AnswerGate gate(1ms);
  auto t = std::make_shared<Track>();
  for (uint64_t seq = 0; seq < 100; ++seq) {
    Answer a;
    ASSERT_TRUE(apply_entry(gate, {{t, seq}}, a));
    ASSERT_TRUE(a.ran_within(1s));  // by the deadline: the stream never writes
  }
  // Each hold() drops what the deadline answered: the stream keeps at most
  // the last one, not a hundred.
  EXPECT_LE(t->waiting(), 1u);
}

}  // namespace
