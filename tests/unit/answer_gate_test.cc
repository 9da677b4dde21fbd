// AnswerGate's rules (server/answer_gate.h): an entry's answers wait for the
// watch streams that took its events, and for nothing else.
#include "server/answer_gate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

namespace {

using etcdq::server::AnswerGate;
using Track = AnswerGate::Track;
using namespace std::chrono_literals;

// Released by writes only: no deadline comes within a test.
constexpr std::chrono::milliseconds kLong = std::chrono::hours(1);

// A task that fulfils a promise, and the future to wait on.
struct Answer {
  std::promise<std::thread::id> ran;
  std::future<std::thread::id> done = ran.get_future();
  std::function<void()> task() {
    return [this] { ran.set_value(std::this_thread::get_id()); };
  }
  bool ran_within(std::chrono::milliseconds d) { return done.wait_for(d) == std::future_status::ready; }
};

TEST(AnswerGate, WithoutNotesTheAnswersAreLeftToTheCaller) {
  AnswerGate gate;
  Answer a;
  auto task = a.task();
  EXPECT_FALSE(gate.hold(task));
  ASSERT_TRUE(task);  // untouched: the caller runs it
  task();
  EXPECT_TRUE(a.ran_within(0ms));
}

TEST(AnswerGate, AnswersWaitUntilTheNotedStreamWroteItsSeq) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);  // this thread now collects, as the apply thread does
  AnswerGate::note(t, 5);
  Answer a;
  auto task = a.task();
  EXPECT_TRUE(gate.hold(task));
  t->written(5);  // seq 5 is the next to write: not yet
  EXPECT_FALSE(a.ran_within(20ms));
  t->written(6);  // everything before 6 is written
  ASSERT_TRUE(a.ran_within(1s));
  EXPECT_NE(a.done.get(), std::this_thread::get_id());  // on the gate's threads
}

TEST(AnswerGate, WhatIsWrittenAlreadyHoldsNothing) {
  AnswerGate gate;
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  t->written(10);
  AnswerGate::note(t, 9);
  Answer a;
  auto task = a.task();
  EXPECT_FALSE(gate.hold(task));
  EXPECT_TRUE(task);
}

TEST(AnswerGate, EveryNotedStreamMustHaveWritten) {
  AnswerGate gate(kLong);
  auto t1 = std::make_shared<Track>();
  auto t2 = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  AnswerGate::note(t1, 0);
  AnswerGate::note(t2, 3);
  AnswerGate::note(t2, 4);  // the same stream again: its last seq counts
  Answer a;
  auto task = a.task();
  ASSERT_TRUE(gate.hold(task));
  t1->written(1);
  t2->written(4);
  EXPECT_FALSE(a.ran_within(20ms));
  t2->written(5);
  EXPECT_TRUE(a.ran_within(1s));
}

TEST(AnswerGate, AClosedStreamHoldsNothing) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  AnswerGate::note(t, 0);
  Answer a;
  auto task = a.task();
  ASSERT_TRUE(gate.hold(task));
  EXPECT_FALSE(a.ran_within(20ms));
  t->close();
  EXPECT_TRUE(a.ran_within(1s));
  // Closed before the entry's answers come: nothing to wait for.
  AnswerGate::note(t, 1);
  Answer b;
  auto task2 = b.task();
  EXPECT_FALSE(gate.hold(task2));
}

TEST(AnswerGate, AStreamThatNeverWritesHoldsAnAnswerAtMostMaxHold) {
  AnswerGate gate;
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  AnswerGate::note(t, 0);
  Answer a;
  auto task = a.task();
  auto start = AnswerGate::Clock::now();
  ASSERT_TRUE(gate.hold(task));
  ASSERT_TRUE(a.ran_within(2s));
  EXPECT_GE(AnswerGate::Clock::now() - start, AnswerGate::kMaxHold);
  t->written(1);  // late: changes nothing, runs nothing twice
}

TEST(AnswerGate, AnEntryWithoutAnswersDropsItsNotes) {
  AnswerGate gate;
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  AnswerGate::note(t, 0);
  EXPECT_FALSE(gate.hold(none));  // a follower's entry, or one of others' proposals
  Answer a;
  auto task = a.task();
  EXPECT_FALSE(gate.hold(task));  // the next entry noted nothing
}

TEST(AnswerGate, OnlyTheApplyThreadCollects) {
  AnswerGate gate;
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  // A stream fed from another thread (catch-up, progress) notes nothing.
  std::thread([&] { AnswerGate::note(t, 0); }).join();
  Answer a;
  auto task = a.task();
  EXPECT_FALSE(gate.hold(task));
}

TEST(AnswerGate, TheGateAnswersWhatItHoldsWhenItGoes) {
  Answer a;
  auto t = std::make_shared<Track>();
  {
    AnswerGate gate(kLong);
    std::function<void()> none;
    gate.hold(none);
    AnswerGate::note(t, 0);
    auto task = a.task();
    ASSERT_TRUE(gate.hold(task));
  }
  EXPECT_TRUE(a.ran_within(0ms));
  t->written(1);  // the stream outlives the gate: nothing runs twice
}

TEST(AnswerGate, DrainAnswersEverythingHereAndThenHoldsNothing) {
  AnswerGate gate(kLong);
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  AnswerGate::note(t, 0);
  Answer a;
  auto task = a.task();
  ASSERT_TRUE(gate.hold(task));
  gate.drain();  // Node::stop(): every proposal answered when it returns
  ASSERT_TRUE(a.ran_within(0ms));
  EXPECT_EQ(a.done.get(), std::this_thread::get_id());
  // Held after the drain: answered at once, here.
  AnswerGate::note(t, 1);
  Answer b;
  auto task2 = b.task();
  EXPECT_TRUE(gate.hold(task2));
  ASSERT_TRUE(b.ran_within(0ms));
  EXPECT_EQ(b.done.get(), std::this_thread::get_id());
  t->written(2);  // nothing runs twice
}

TEST(AnswerGate, AStalledStreamPinsNothingOnceItsAnswersWent) {
  AnswerGate gate(1ms);
  auto t = std::make_shared<Track>();
  std::function<void()> none;
  gate.hold(none);
  for (uint64_t seq = 0; seq < 100; ++seq) {
    AnswerGate::note(t, seq);
    Answer a;
    auto task = a.task();
    ASSERT_TRUE(gate.hold(task));
    ASSERT_TRUE(a.ran_within(1s));  // by the deadline: the stream never writes
  }
  // Each hold() drops what the deadline answered: the stream keeps at most
  // the last one, not a hundred.
  EXPECT_LE(t->waiting(), 1u);
}

}  // namespace
