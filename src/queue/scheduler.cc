#include "queue/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/thread_name.h"

namespace etcdq::queue {
namespace {
int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Scheduler::Scheduler(Book* book, Host* host, SchedulerOptions opts)
    : book_(book), host_(host), opts_(std::move(opts)) {}

Scheduler::~Scheduler() { stop(); }

void Scheduler::start() { thread_ = std::thread([this] {
    set_thread_name("queue-sched");
    run();
  }); }

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::changed(std::vector<std::string>&& queues) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& q : queues) dirty_.insert(std::move(q));
    woken_ = true;
  }
  cv_.notify_one();
}

void Scheduler::reported(uint64_t member, uint64_t report, uint32_t part, uint32_t parts,
                         std::vector<ConsumerRef> consumers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto now = Clock::now();
    for (auto it = partial_.begin(); it != partial_.end();) {
      it = now - it->second.started > kReportStale ? partial_.erase(it) : std::next(it);
    }
    parts = std::max<uint32_t>(parts, 1);
    if (parts > kMaxReportParts || part >= parts) return;
    Partial& p = partial_[member];
    if (p.report != report || p.parts != parts) p = Partial{report, parts, {}, {}, now};
    if (!p.received.insert(part).second) return;  // a part sent twice
    if (p.consumers.size() + consumers.size() > kMaxReportedConsumers) {
      partial_.erase(member);
      return;
    }
    for (auto& c : consumers) p.consumers.push_back(std::move(c));
    if (p.received.size() < parts) return;
    reports_[member] = Report{std::move(p.consumers), now};
    partial_.erase(member);
    full_ = true;
    woken_ = true;
  }
  cv_.notify_one();
}

void Scheduler::set_leading(bool leading) {
  role_leading_ = leading;
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void Scheduler::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, kTick, [this] { return stop_ || woken_; });
      if (stop_) return;
      woken_ = false;
    }
    host_->tick();
    bool leader = role_leading_.load();
    bool full;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (leader && !leading_) {
        leading_since_ = Clock::now();
        reports_.clear();  // reports were sent to whoever led before
        partial_.clear();
      }
      if (leader != leading_) {
        proposed_.clear();
        ++generation_;
        full_ = true;
      }
      leading_ = leader;
      uint64_t hv = host_->version();
      if (hv != host_version_seen_) {
        host_version_seen_ = hv;
        full_ = true;
      }
      auto now = Clock::now();
      if (now - last_full_ >= kFullPass) full_ = true;
      full = full_;
      if (full) {
        full_ = false;
        last_full_ = now;
      }
    }
    if (leader) {
      lead(unix_ms(), full);
    } else {
      report_if_due();
    }
  }
}

void Scheduler::lead(int64_t now_ms, bool full) {
  std::vector<std::string> queues;
  Holders holders;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (full) {
      dirty_.clear();
    } else {
      queues.assign(dirty_.begin(), dirty_.end());
      dirty_.clear();
    }
    auto now = Clock::now();
    for (const auto& [member, r] : reports_) {
      if (member == opts_.self || now - r.at >= kReportStale) continue;
      for (const auto& c : r.consumers) holders[c.queue].push_back({member, c.instance});
    }
  }
  for (const auto& c : host_->consumers()) holders[c.queue].push_back({opts_.self, c.instance});
  if (full) {
    // Every queue that holds messages or has ready consumers, and every
    // queue a live consumer waits on (it may have to be made ready).
    queues = book_->queues();
    std::set<std::string, std::less<>> seen(queues.begin(), queues.end());
    for (const auto& [q, hs] : holders) {
      if (!seen.count(q)) queues.push_back(q);
    }
  }
  static const std::vector<Holder> kNone;
  for (const auto& q : queues) {
    if (opts_.skip && opts_.skip(q)) continue;
    auto it = holders.find(q);
    schedule(q, it == holders.end() ? kNone : it->second, now_ms);
  }
}

bool Scheduler::alive(const Holder& h) const {
  if (h.member == opts_.self) return host_->has(h.instance);
  auto it = reports_.find(h.member);
  if (it != reports_.end() && Clock::now() - it->second.at < kReportStale) {
    return std::any_of(it->second.consumers.begin(), it->second.consumers.end(),
                       [&](const ConsumerRef& c) { return c.instance == h.instance; });
  }
  // A member we do not hear from may be down, or only cut off from us while
  // its consumer still works: what it holds stays its own until the
  // visibility timeout (it gets nothing new meanwhile).
  return true;
}

void Scheduler::schedule(const std::string& queue, const std::vector<Holder>& holders_in, int64_t now_ms) {
  QueueView v;
  if (!book_->view(queue, &v)) {  // empty and dropped from the book
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = proposed_.find(queue);
      if (it != proposed_.end() && it->second.idx.empty() && !it->second.ready_pending) proposed_.erase(it);
    }
    if (holders_in.empty()) return;
    v.name = queue;  // consumers wait on an empty queue: they are to be made ready
  }
  // nothing to hand out, nothing to take back, no one to make ready or not
  if (holders_in.empty() && v.handed_out.empty() && v.ready.empty()) return;
  std::vector<Holder> holders = holders_in;
  apply::Command cmd;
  auto* a = cmd.mutable_queue_assign();
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = generation_;
    std::sort(holders.begin(), holders.end());
    Proposed& p = proposed_[queue];
    // Which consumers apply hands new messages to (book.h, "fill"): the
    // live ones. One such change in flight a queue at a time.
    if (!p.ready_pending) {
      std::vector<ReadyConsumer> want;
      for (const auto& h : holders) want.push_back({h.member, h.instance});
      want.erase(std::unique(want.begin(), want.end()), want.end());
      for (const auto& r : want) {
        if (!std::binary_search(v.ready.begin(), v.ready.end(), r)) {
          auto* c = a->add_ready();
          c->set_member(r.member);
          c->set_instance(r.instance);
        }
      }
      for (const auto& r : v.ready) {
        if (std::binary_search(want.begin(), want.end(), r)) continue;
        // Not live as far as this leader knows: a new leader has no
        // member's report yet, so its first round takes every other
        // member's consumers out (those of a leader that died must not get
        // new messages), and each comes back with its member's report,
        // which a member sends as soon as it sees the new leader.
        auto* c = a->add_gone();
        c->set_member(r.member);
        c->set_instance(r.instance);
      }
      p.ready_pending = a->ready_size() > 0 || a->gone_size() > 0;
    }
    std::map<Holder, uint32_t> used;
    for (const auto& [idx, h] : p.idx) ++used[h];

    // Messages handed out before: still held, due again, or dead.
    std::vector<std::pair<uint64_t, uint32_t>> again;  // idx, deliveries
    for (const auto& [idx, m] : v.handed_out) {
      if (p.idx.count(idx)) continue;
      Holder h{m.member(), m.instance()};
      if (m.member() != 0 && now_ms < m.deadline_ms() && alive(h)) {
        ++used[h];
        continue;
      }
      if (m.deliveries() >= v.config.max_deliveries) {
        auto* d = a->add_assignments();
        d->set_idx(idx);
        d->set_deliveries(m.deliveries());
        d->set_reason("delivered " + std::to_string(m.deliveries()) + (m.deliveries() == 1 ? " time" : " times") +
                      " without an ack (max_deliveries " + std::to_string(v.config.max_deliveries) + ")");
        p.idx[idx] = Holder{};
        continue;
      }
      again.emplace_back(idx, m.deliveries());
    }

    size_t next = holders.empty() ? 0 : rotate_++ % holders.size();
    auto pick = [&](Holder* out) {
      for (size_t i = 0; i < holders.size(); ++i) {
        const Holder& h = holders[(next + i) % holders.size()];
        if (used[h] < v.config.max_in_flight) {
          *out = h;
          ++used[h];
          next = (next + i + 1) % holders.size();
          return true;
        }
      }
      return false;
    };
    auto add = [&](uint64_t idx, uint32_t deliveries, const Holder& h) {
      auto* d = a->add_assignments();
      d->set_idx(idx);
      d->set_deliveries(deliveries);
      d->set_member(h.member);
      d->set_instance(h.instance);
      p.idx[idx] = h;
    };
    Holder h;
    bool full = false;
    for (const auto& [idx, deliveries] : again) {
      if (static_cast<size_t>(a->assignments_size()) >= kMaxAssignmentsPerCommand || !pick(&h)) {
        full = true;
        break;
      }
      add(idx, deliveries, h);
    }
    uint64_t fresh = std::max(v.counters.cursor(), p.fresh_up_to) + 1;
    while (!full && fresh < v.counters.next_idx() &&
           static_cast<size_t>(a->assignments_size()) < kMaxAssignmentsPerCommand && pick(&h)) {
      add(fresh, 0, h);
      p.fresh_up_to = fresh++;
    }
  }
  bool ready_change = a->ready_size() > 0 || a->gone_size() > 0;
  if (a->assignments_size() == 0 && !ready_change) return;
  a->set_queue(queue);
  a->set_deadline_ms(now_ms + v.config.visibility_ms);
  std::vector<uint64_t> decided;
  decided.reserve(a->assignments_size());
  for (const auto& d : a->assignments()) decided.push_back(d.idx());
  opts_.propose(std::move(cmd), [this, queue, generation, ready_change, decided = std::move(decided)](Error e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (generation == generation_) {
        Proposed& p = proposed_[queue];
        for (uint64_t idx : decided) p.idx.erase(idx);
        if (ready_change) p.ready_pending = false;
        // Not applied: decide again from what the log says, at the next
        // tick (not at once: a failing proposal must not spin).
        if (e) p.fresh_up_to = 0;
      }
      if (!e) woken_ = true;
    }
    if (!e) cv_.notify_one();
  });
}

void Scheduler::report_if_due() {
  std::string target = opts_.leader_target ? opts_.leader_target() : "";
  if (target.empty() || !opts_.report) return;
  uint64_t version = host_->version();
  auto now = Clock::now();
  if (version == reported_version_ && target == reported_to_ && now - reported_at_ < kReportEvery) return;
  // In parts under the leader's receive limit; names stay here (the leader
  // needs the queue and the instance only).
  uint64_t report = next_report_++;
  std::vector<peer::QueueConsumersRequest> parts(1);
  size_t bytes = 0;
  for (const auto& c : host_->consumers()) {
    size_t size = c.queue.size() + 16;
    if (bytes > 0 && bytes + size > kMaxReportPartBytes) {
      parts.emplace_back();
      bytes = 0;
    }
    auto* r = parts.back().add_consumers();
    r->set_queue(c.queue);
    r->set_instance(c.instance);
    bytes += size;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].set_member(opts_.self);
    parts[i].set_report(report);
    parts[i].set_part(static_cast<uint32_t>(i));
    parts[i].set_parts(static_cast<uint32_t>(parts.size()));
    opts_.report(target, parts[i]);
  }
  reported_version_ = version;
  reported_to_ = target;
  reported_at_ = now;
}

}  // namespace etcdq::queue
