#include "member/answer_gate.h"

#include <algorithm>

#include "common/thread_name.h"

namespace etcdq::member {

// What the gate's threads share with the answers they run: answers may be
// released by a stream after the gate drained or went, and then run where
// they are.
struct AnswerGate::Core {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> ready;
  std::deque<std::shared_ptr<Held>> by_deadline;  // hold() order = deadline order
  bool stopped = false;  // drained: answers run on the thread that releases them

  void run_or_queue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!stopped) {
        ready.push_back(std::move(task));
        cv.notify_one();
        return;
      }
    }
    task();
  }
};

struct AnswerGate::Held {
  std::function<void()> answers;
  std::atomic<int> waiting{0};
  std::atomic<bool> released{false};
  Clock::time_point deadline;
  std::shared_ptr<Core> core;

  // Exactly once, whoever gets here first.
  void release() {
    if (released.exchange(true)) return;
    core->run_or_queue(std::move(answers));
  }
  void one_done() {
    if (waiting.fetch_sub(1) == 1) release();
  }
};

namespace {
// The notes of the entry the apply thread is running (hold() consumes
// them). Off until the first hold() on this thread: only the apply thread
// collects. Offers on that thread between two entries (there are none
// today) would count for the next one, which only makes it wait longer.
thread_local bool t_collecting = false;
thread_local uint64_t t_entry = 1;  // which entry t_notes belongs to
thread_local std::vector<std::pair<std::shared_ptr<AnswerGate::Track>, uint64_t>> t_notes;
}  // namespace

void AnswerGate::Track::written(uint64_t below) {
  std::vector<std::shared_ptr<Held>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    below_ = std::max(below_, below);
    while (!waiting_.empty() && waiting_.front().first < below_) {
      done.push_back(std::move(waiting_.front().second));
      waiting_.pop_front();
    }
  }
  for (auto& h : done) h->one_done();
}

void AnswerGate::Track::close() {
  std::deque<std::pair<uint64_t, std::shared_ptr<Held>>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    done.swap(waiting_);
  }
  for (auto& [seq, h] : done) h->one_done();
}

size_t AnswerGate::Track::waiting() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.size();
}

AnswerGate::AnswerGate(std::chrono::milliseconds max_hold) : max_hold_(max_hold), core_(std::make_shared<Core>()) {
  for (int i = 0; i < kThreads; ++i) threads_.emplace_back([this] {
    set_thread_name("answer-gate");
    run();
  });
}

AnswerGate::~AnswerGate() {
  drain();
  for (auto& t : threads_) t.join();
}

void AnswerGate::drain() {
  std::deque<std::function<void()>> ready;
  std::deque<std::shared_ptr<Held>> held;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->stopped = true;
    ready.swap(core_->ready);
    held.swap(core_->by_deadline);
  }
  core_->cv.notify_all();
  for (auto& task : ready) task();
  for (auto& h : held) h->release();  // stopped: runs here
}

void AnswerGate::note(const std::shared_ptr<Track>& t, uint64_t seq) {
  if (!t_collecting) return;
  // A stream is noted once an entry, at its last seq (it gets one offer
  // per watcher: no scan of the notes, whatever their number).
  if (t->noted_entry_ == t_entry) {
    auto& n = t_notes[t->noted_slot_];
    n.second = std::max(n.second, seq);
    return;
  }
  t->noted_entry_ = t_entry;
  t->noted_slot_ = t_notes.size();
  t_notes.emplace_back(t, seq);
}

bool AnswerGate::hold(std::function<void()>& answers) {
  t_collecting = true;
  ++t_entry;
  if (!answers || t_notes.empty()) {
    t_notes.clear();
    return false;
  }
  auto h = std::make_shared<Held>();
  h->core = core_;
  h->deadline = Clock::now() + max_hold_;
  // One count for this call, so nothing releases it before every stream
  // is registered.
  h->waiting.store(1 + static_cast<int>(t_notes.size()));
  int already = 0;
  for (auto& [t, seq] : t_notes) {
    std::lock_guard<std::mutex> lock(t->mu_);
    // What earlier entries left here and is answered already (by the
    // deadline) keeps nothing alive: a stream that stalled holds no more
    // than what is still waiting.
    while (!t->waiting_.empty() && t->waiting_.front().second->released.load()) t->waiting_.pop_front();
    if (t->closed_ || seq < t->below_) {
      ++already;
    } else {
      t->waiting_.emplace_back(seq, h);
    }
  }
  t_notes.clear();  // keeps its capacity for the next entry
  h->answers = std::move(answers);
  if (h->waiting.fetch_sub(1 + already) == 1 + already) {
    // Everything was written already: the caller answers as usual.
    h->released.store(true);
    answers = std::move(h->answers);
    return false;
  }
  bool stopped;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    stopped = core_->stopped;
    if (!stopped) {
      core_->by_deadline.push_back(h);
      core_->cv.notify_one();
    }
  }
  if (stopped) h->release();  // drained: answer now (runs here)
  return true;
}

void AnswerGate::run() {
  std::unique_lock<std::mutex> lock(core_->mu);
  while (!core_->stopped) {
    // Past their deadline (or answered already): let go, before running
    // anything, so a deadline never waits behind a backlog of answers.
    auto now = Clock::now();
    while (!core_->by_deadline.empty() &&
           (core_->by_deadline.front()->released.load() || core_->by_deadline.front()->deadline <= now)) {
      auto h = std::move(core_->by_deadline.front());
      core_->by_deadline.pop_front();
      if (!h->released.exchange(true)) core_->ready.push_back(std::move(h->answers));
    }
    if (!core_->ready.empty()) {
      auto task = std::move(core_->ready.front());
      core_->ready.pop_front();
      lock.unlock();
      task();
      lock.lock();
      continue;
    }
    if (core_->by_deadline.empty()) {
      core_->cv.wait(lock);
    } else {
      // A copy: wait_until reads it after waking, and by then another
      // thread may have let that answer go and freed it.
      const Clock::time_point next = core_->by_deadline.front()->deadline;
      core_->cv.wait_until(lock, next);
    }
  }
}

}  // namespace etcdq::member
