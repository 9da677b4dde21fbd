#include "queue/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

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

void Scheduler::start() { thread_ = std::thread([this] { run(); }); }

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void Scheduler::reported(uint64_t member, std::vector<ConsumerRef> consumers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    reports_[member] = Report{std::move(consumers), Clock::now()};
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
    bool leader = opts_.is_leader();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (leader && !leading_) {
        leading_since_ = Clock::now();
        reports_.clear();  // reports were sent to whoever led before
      }
      if (leader != leading_) {
        proposed_.clear();
        ++generation_;
      }
      leading_ = leader;
    }
    if (leader) {
      lead(unix_ms());
    } else {
      report_if_due();
    }
  }
}

void Scheduler::lead(int64_t now_ms) {
  for (const auto& q : book_->queues()) {
    if (opts_.skip && opts_.skip(q)) continue;
    schedule(q, now_ms);
  }
}

bool Scheduler::alive(const Holder& h) const {
  if (h.member == opts_.self) return host_->has(h.instance);
  auto now = Clock::now();
  auto it = reports_.find(h.member);
  if (it != reports_.end() && now - it->second.at < kReportStale) {
    return std::any_of(it->second.consumers.begin(), it->second.consumers.end(),
                       [&](const ConsumerRef& c) { return c.instance == h.instance; });
  }
  // Not heard from: a new leader gives members time to report first.
  return now - leading_since_ < kLeaderGrace;
}

void Scheduler::schedule(const std::string& queue, int64_t now_ms) {
  QueueView v;
  if (!book_->view(queue, &v)) return;
  std::vector<Holder> holders;
  for (const auto& c : host_->consumers()) {
    if (c.queue == queue) holders.push_back({opts_.self, c.instance});
  }
  apply::Command cmd;
  auto* a = cmd.mutable_queue_assign();
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = generation_;
    auto now = Clock::now();
    for (const auto& [member, r] : reports_) {
      if (member == opts_.self || now - r.at >= kReportStale) continue;
      for (const auto& c : r.consumers) {
        if (c.queue == queue) holders.push_back({member, c.instance});
      }
    }
    std::sort(holders.begin(), holders.end());
    Proposed& p = proposed_[queue];
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
        d->set_reason("delivered " + std::to_string(m.deliveries()) + " times without an ack (max_deliveries " +
                      std::to_string(v.config.max_deliveries) + ")");
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
  if (a->assignments_size() == 0) return;
  a->set_queue(queue);
  a->set_deadline_ms(now_ms + v.config.visibility_ms);
  std::vector<uint64_t> decided;
  decided.reserve(a->assignments_size());
  for (const auto& d : a->assignments()) decided.push_back(d.idx());
  opts_.propose(std::move(cmd), [this, queue, generation, decided = std::move(decided)](Error e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (generation == generation_) {
        Proposed& p = proposed_[queue];
        for (uint64_t idx : decided) p.idx.erase(idx);
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
  peer::QueueConsumersRequest req;
  req.set_member(opts_.self);
  for (const auto& c : host_->consumers()) {
    auto* r = req.add_consumers();
    r->set_queue(c.queue);
    r->set_instance(c.instance);
    r->set_name(c.name);
  }
  opts_.report(target, req);
  reported_version_ = version;
  reported_to_ = target;
  reported_at_ = now;
}

}  // namespace etcdq::queue
