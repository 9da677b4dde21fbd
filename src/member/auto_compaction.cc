#include "member/auto_compaction.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <future>
#include <limits>
#include <memory>

#include "common/thread_name.h"

namespace etcdq::member {
namespace {

constexpr int64_t kHourMs = 3600 * 1000;

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Go's time.ParseDuration: an optional sign, then one or more
// <decimal><unit> with units ns, us (µs), ms, s, m, h. Nanoseconds, or
// Go's error text.
std::string parse_go_duration(const std::string& s, int64_t* ns) {
  static const std::pair<const char*, double> kUnits[] = {{"ns", 1},    {"us", 1e3},   {"\xc2\xb5s", 1e3},
                                                          {"ms", 1e6},  {"s", 1e9},    {"m", 60e9},
                                                          {"h", 3600e9}};
  const std::string quoted = "\"" + s + "\"";
  std::string rest = s;
  bool negative = !rest.empty() && rest[0] == '-';
  if (!rest.empty() && (rest[0] == '+' || rest[0] == '-')) rest = rest.substr(1);
  if (rest == "0") {
    *ns = 0;
    return "";
  }
  if (rest.empty()) return "time: invalid duration " + quoted;
  double total = 0;
  size_t i = 0;
  while (i < rest.size()) {
    size_t start = i;
    while (i < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[i])) || rest[i] == '.')) ++i;
    std::string number = rest.substr(start, i - start);
    if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1) {
      return "time: invalid duration " + quoted;
    }
    double value = std::stod(number);
    size_t unit_start = i;
    while (i < rest.size() && !std::isdigit(static_cast<unsigned char>(rest[i])) && rest[i] != '.') ++i;
    std::string unit = rest.substr(unit_start, i - unit_start);
    if (unit.empty()) return "time: missing unit in duration " + quoted;
    double scale = -1;
    for (const auto& [name, s_ns] : kUnits) {
      if (unit == name) scale = s_ns;
    }
    if (scale < 0) return "time: unknown unit \"" + unit + "\" in duration " + quoted;
    total += value * scale;
  }
  if (total > static_cast<double>(std::numeric_limits<int64_t>::max())) return "time: invalid duration " + quoted;
  *ns = static_cast<int64_t>(negative ? -total : total);
  return "";
}

// A duration as Go's time.Duration.String() prints it ("1h0m0s", "2s",
// "500ms"), for etcd's log lines.
std::string go_duration(int64_t ms) {
  if (ms < 1000) return std::to_string(ms) + "ms";
  std::string out;
  int64_t h = ms / kHourMs, m = ms / 60000 % 60, sec = ms / 1000 % 60, frac = ms % 1000;
  if (h > 0) out += std::to_string(h) + "h";
  if (h > 0 || m > 0) out += std::to_string(m) + "m";
  out += std::to_string(sec);
  if (frac > 0) {
    std::string f = std::to_string(1000 + frac).substr(1);
    while (f.back() == '0') f.pop_back();
    out += "." + f;
  }
  return out + "s";
}

}  // namespace

Error parse_go_duration_ms(const std::string& text, int64_t* ms) {
  int64_t ns = 0;
  std::string error = parse_go_duration(text, &ns);
  if (!error.empty()) return Error(Code::kInvalidArgument, error);
  *ms = ns / 1000000;
  return {};
}

Error parse_compaction_retention(CompactionMode mode, const std::string& text, int64_t* retention) {
  std::string digits = !text.empty() && text[0] == '+' ? text.substr(1) : text;
  if (all_digits(digits) && digits.size() <= 12) {
    int64_t n = std::stoll(digits);
    *retention = mode == CompactionMode::kRevision ? n : n * kHourMs;
    return {};
  }
  int64_t ns = 0;
  // Malformed: Go's words (etcd 3.6 says them: "-1" is "missing unit").
  // A negative duration, which Go would take, is refused too: it means nothing.
  std::string error = parse_go_duration(text, &ns);
  if (error.empty() && ns < 0) error = "time: invalid duration \"" + text + "\"";
  if (!error.empty()) return {Code::kInvalidArgument, "error parsing CompactionRetention: " + error};
  if (mode == CompactionMode::kRevision) {
    *retention = ns;
  } else {
    // Milliseconds, rounded up: a sub-millisecond retention is still on.
    *retention = ns / 1000000 + (ns % 1000000 != 0 ? 1 : 0);
  }
  return {};
}

PeriodicSchedule::PeriodicSchedule(int64_t retention_ms, int64_t now_ms)
    : tick_ms_(std::max<int64_t>(1, std::min(retention_ms, kHourMs) / 10)),
      compact_every_ms_(std::min(retention_ms, kHourMs)),
      keep_(static_cast<size_t>(retention_ms / tick_ms_ + 1)),
      last_success_ms_(now_ms),
      wait_ms_(retention_ms) {}

void PeriodicSchedule::record(int64_t revision) {
  revisions_.push_back(revision);
  // revisions_.front() is then the revision of one retention ago.
  while (revisions_.size() > keep_) revisions_.pop_front();
}

int64_t PeriodicSchedule::due(int64_t now_ms, bool leading) {
  if (!leading || revisions_.empty()) return 0;
  int64_t rev = revisions_.front();
  if (now_ms - last_success_ms_ < wait_ms_ || rev == last_revision_ || rev <= 0) return 0;
  // The first compaction waits a whole retention; later ones come every
  // min(retention, 1 h).
  wait_ms_ = compact_every_ms_;
  return rev;
}

void PeriodicSchedule::compacted(int64_t revision, int64_t now_ms) {
  last_revision_ = revision;
  last_success_ms_ = now_ms;
}

int64_t RevisionSchedule::due(int64_t current_revision, bool leading) const {
  if (!leading) return 0;
  int64_t rev = current_revision - retention_;
  if (rev <= 0 || rev == last_revision_) return 0;
  return rev;
}

AutoCompactor::AutoCompactor(CompactionMode mode, int64_t retention, Hooks hooks)
    : mode_(mode), retention_(retention), hooks_(std::move(hooks)) {}

AutoCompactor::~AutoCompactor() { stop(); }

void AutoCompactor::start() {
  thread_ = std::thread([this] {
    set_thread_name("auto-compact");
    run();
  });
}

void AutoCompactor::set_leading(bool leading) {
  std::lock_guard<std::mutex> lock(mu_);
  leading_ = leading;
}

void AutoCompactor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t AutoCompactor::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(hooks_.now().time_since_epoch()).count();
}

Error AutoCompactor::compact(int64_t revision) {
  auto done = std::make_shared<std::promise<Error>>();
  std::future<Error> result = done->get_future();
  hooks_.compact(revision, [done](Error e) { done->set_value(std::move(e)); });
  // A proposal is always answered (member/pipeline.h), also when consensus
  // stops, so this wait ends.
  return result.get();
}

void AutoCompactor::run() {
  const bool periodic = mode_ == CompactionMode::kPeriodic;
  PeriodicSchedule periodic_schedule(periodic ? retention_ : kHourMs, now_ms());
  RevisionSchedule revision_schedule(retention_);
  const int64_t tick_ms = periodic ? periodic_schedule.tick_ms() : revision_schedule.tick_ms();
  if (periodic) {
    spdlog::info("auto-compaction: periodic, retention {}, checking every {}", go_duration(retention_),
                 go_duration(tick_ms));
  } else {
    spdlog::info("auto-compaction: revision, keeping {} revisions, checking every {}", retention_,
                 go_duration(tick_ms));
  }
  for (;;) {
    if (periodic) periodic_schedule.record(hooks_.current_revision());
    bool leading;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(tick_ms), [this] { return stop_; })) return;
      leading = leading_;
    }
    int64_t rev = periodic ? periodic_schedule.due(now_ms(), leading)
                           : revision_schedule.due(hooks_.current_revision(), leading);
    if (rev == 0) continue;
    // etcd 3.4's capnslog line, and its zap fields.
    if (periodic) {
      spdlog::info("Starting auto-compaction at revision {} (retention: {})", rev, go_duration(retention_));
    } else {
      spdlog::info("Starting auto-compaction at revision {} (retention: {} revisions)", rev, retention_);
    }
    auto started = std::chrono::steady_clock::now();
    Error e = compact(rev);
    // Already compacted counts as done, as in etcd.
    if (!e || e == errors::compacted()) {
      if (periodic) {
        periodic_schedule.compacted(rev, now_ms());
      } else {
        revision_schedule.compacted(rev);
      }
      spdlog::info("Finished auto-compaction at revision {} (took {} ms)", rev,
                   std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started)
                       .count());
    } else {
      spdlog::warn("Failed auto-compaction at revision {} ({}); retrying after {}", rev, e.message(),
                   go_duration(tick_ms));
    }
  }
}

}  // namespace etcdq::member
