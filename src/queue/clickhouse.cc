#include "queue/clickhouse.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <future>
#include <set>
#include <nlohmann/json.hpp>

#include "common/thread_name.h"
#include "mvcc/codec.h"
#include "queue/keys.h"

namespace etcdq::queue {
namespace {

std::string ch_backquoted(std::string_view name) {
  std::string out = "`";
  for (char c : name) {
    if (c == '`' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "`";
}

// A ClickHouse string literal.
std::string ch_quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "'";
}

std::string ch_url_encode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

// The queue's name as a JSON string: a queue name is bytes, and a broken
// UTF-8 sequence shows as U+FFFD (what ClickHouse then stores, so the
// lookups use the same text: ch_queue_text).
std::string ch_queue_json(std::string_view queue) {
  return nlohmann::json(std::string(queue)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ch_queue_text(std::string_view queue) {
  return nlohmann::json::parse(ch_queue_json(queue)).get<std::string>();
}

// What went wrong on the way, in words (httplib's names are enum names).
std::string ch_transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect: refused, or nothing listens there";
    case httplib::Error::ConnectionTimeout:
      return "connecting timed out";
    case httplib::Error::Read:
      return "no answer: the connection closed or the answer took too long";
    case httplib::Error::Write:
      return "the connection broke while sending";
    default:
      return httplib::to_string(e) + " error";
  }
}

}  // namespace

ClickHouseSink::ClickHouseSink(Book* book, mvcc::Store* store, ClickHouseOptions opts)
    : book_(book), store_(store), opts_(std::move(opts)) {}

ClickHouseSink::~ClickHouseSink() { stop(); }

void ClickHouseSink::start() { thread_ = std::thread([this] {
    set_thread_name("queue-sink");
    run();
  }); }

void ClickHouseSink::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (active_) active_->stop();  // ends an insert that hangs
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ClickHouseSink::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void ClickHouseSink::set_leading(bool leading) {
  leading_epoch_.fetch_add(1);
  role_leading_ = leading;
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void ClickHouseSink::run() {
  // Said once at start, on every member, so that a wrong --clickhouse-url
  // shows before the first message: one line either way (request() logs
  // the failure).
  if (!opts_.url.empty()) {
    std::string version;
    if (!request("", "SELECT version()", &version)) {
      while (!version.empty() && (version.back() == '\n' || version.back() == '\r')) version.pop_back();
      spdlog::info("ClickHouse at {} answers (version {}); ch:{{table}} queues insert into database {}", opts_.url,
                   version, opts_.database);
    }
  }
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_ || woken_; });
      if (stop_) return;
      woken_ = false;
    }
    if (!role_leading_.load()) continue;
    bool busy = true;
    while (busy) {
      busy = false;
      for (const auto& q : book_->queues()) {
        std::string_view table;
        if (!clickhouse_table(q, &table)) continue;
        QueueView v;
        if (!book_->view(q, &v) || v.counters.depth() == 0) continue;
        if (opts_.url.empty()) {
          if (told_not_set_up_.insert(q).second) {
            spdlog::warn("queue {}: no --clickhouse-url is set, so its messages stay queued", q);
          }
          continue;
        }
        auto it = retry_at_.find(q);
        if (it != retry_at_.end() && std::chrono::steady_clock::now() < it->second) continue;
        if (drain(q, table)) busy = true;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_) return;
        }
        if (!role_leading_.load()) break;
      }
    }
  }
}

Error ClickHouseSink::propose_and_wait(apply::Command cmd) {
  auto done = std::make_shared<std::promise<Error>>();
  auto fut = done->get_future();
  opts_.propose(std::move(cmd), [done](Error e) { done->set_value(e); });
  return fut.get();
}

Error ClickHouseSink::request(const std::string& query, const std::string& body, std::string* out) {
  httplib::Client cli(opts_.url);
  cli.set_connection_timeout(std::chrono::seconds(2));
  cli.set_read_timeout(kInsertTimeout);
  cli.set_write_timeout(kInsertTimeout);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return errors::stopped();
    active_ = &cli;
  }
  std::string path = query.empty() ? "/" : "/?query=" + ch_url_encode(query);
  auto res = cli.Post(path, body, query.empty() ? "text/plain" : "application/x-ndjson");
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = nullptr;
    if (stop_) return errors::stopped();
  }
  // Sent, and the answer lost: ClickHouse may still be taking it.
  last_uncertain_ = !res && res.error() != httplib::Error::Connection &&
                    res.error() != httplib::Error::ConnectionTimeout;
  if (!res) {
    Error e{Code::kUnavailable,
            "ClickHouse at " + opts_.url + " does not answer (" + ch_transport_error(res.error()) + ")"};
    if (reach_ != Reach::kSilent) {
      spdlog::warn("{}: the ch:{{table}} queues keep their messages and retry until it answers (--clickhouse-url)",
                   e.message());
      reach_ = Reach::kSilent;
    }
    return e;
  }
  if (reach_ == Reach::kSilent) spdlog::info("ClickHouse at {} answers again", opts_.url);
  reach_ = Reach::kAnswers;
  if (res->status != 200) {
    std::string text = res->body.substr(0, 300);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (text.find(kIdxColumn) != std::string::npos || text.find(kQueueColumn) != std::string::npos) {
      text += " (the table needs the columns " + std::string(kQueueColumn) + " String and " + std::string(kIdxColumn) +
              " UInt64: README, \"Work queues\")";
    }
    return {Code::kUnavailable, "ClickHouse answered " + std::to_string(res->status) + ": " + text};
  }
  *out = std::move(res->body);
  return {};
}

Error ClickHouseSink::highest_idx(std::string_view table, const std::string& queue, uint64_t* out) {
  std::string sql = "SELECT max(" + std::string(kIdxColumn) + ") FROM " + ch_backquoted(opts_.database) + "." +
                    ch_backquoted(table) + " WHERE " + std::string(kQueueColumn) + " = " +
                    ch_quoted(ch_queue_text(queue)) + " FORMAT TabSeparated";
  std::string answer;
  if (Error e = request("", sql, &answer)) return e;
  char* end = nullptr;
  *out = std::strtoull(answer.c_str(), &end, 10);
  if (end == answer.c_str()) return {Code::kUnavailable, "ClickHouse answered " + answer.substr(0, 100) + " to " + sql};
  return {};
}

Error ClickHouseSink::held_idx(std::string_view table, const std::string& queue, const std::vector<uint64_t>& idx,
                               std::set<uint64_t>* out) {
  std::string sql = "SELECT " + std::string(kIdxColumn) + " FROM " + ch_backquoted(opts_.database) + "." +
                    ch_backquoted(table) + " WHERE " + std::string(kQueueColumn) + " = " +
                    ch_quoted(ch_queue_text(queue)) + " AND " + std::string(kIdxColumn) + " IN (";
  for (size_t i = 0; i < idx.size(); ++i) {
    if (i > 0) sql += ',';
    sql += std::to_string(idx[i]);
  }
  sql += ") FORMAT TabSeparated";
  std::string answer;
  if (Error e = request("", sql, &answer)) return e;
  size_t at = 0;
  while (at < answer.size()) {
    size_t nl = answer.find('\n', at);
    if (nl == std::string::npos) nl = answer.size();
    if (nl > at) out->insert(std::strtoull(answer.substr(at, nl - at).c_str(), nullptr, 10));
    at = nl + 1;
  }
  return {};
}

void ClickHouseSink::refused(const std::string& queue, size_t rows, const Error& e) {
  auto& b = backoff_[queue];
  // While ClickHouse does not answer at all, request() said so once for
  // every queue; an answer that refuses is this queue's own.
  if (reach_ != Reach::kSilent && told_refused_.insert(queue).second) {
    spdlog::warn("queue {}: ClickHouse did not take a batch of {} rows: {}; the messages stay queued and are retried",
                 queue, rows, e.message());
  }
  b = b.count() == 0 ? std::chrono::duration_cast<std::chrono::milliseconds>(kMinBackoff)
                     : std::min(b * 2, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxBackoff));
  retry_at_[queue] = std::chrono::steady_clock::now() + b;
}

bool ClickHouseSink::drain(const std::string& queue, std::string_view table) {
  // What ClickHouse held was learnt while leading before: another leader
  // may have inserted since.
  if (uint64_t epoch = leading_epoch_.load(); epoch != seen_epoch_) {
    seen_epoch_ = epoch;
    known_high_.clear();
  }
  auto view = store_->view();
  std::string prefix = message_meta_key(queue, 0);
  prefix.resize(prefix.size() - kIdxDigits);
  storage::Iterator it = view->iterator(storage::Cf::kMeta);
  struct Row {
    uint64_t idx;
    std::string key;
    std::string text;  // one line, with the queue and idx fields
  };
  std::vector<Row> batch;
  size_t bytes = 0;
  const std::string queue_json = ch_queue_json(queue);
  apply::Command dead;
  auto* a = dead.mutable_queue_assign();
  for (it.seek(prefix); it.valid() && it.key().starts_with(prefix); it.next()) {
    if (batch.size() >= kMaxBatchRows || bytes >= kMaxBatchBytes) break;
    uint64_t idx = std::strtoull(std::string(it.key().substr(prefix.size())).c_str(), nullptr, 10);
    apply::QueueMessage m;
    if (!m.ParseFromArray(it.value().data(), static_cast<int>(it.value().size()))) continue;
    std::string key = message_key(queue, idx, m.tail());
    std::string rec;
    mvccpb::KeyValue kv;
    if (!view->get(storage::Cf::kLatest, key, &rec) || !mvcc::decode_record(rec, &kv)) continue;
    // A field named twice: JSON allows it, ClickHouse refuses the whole
    // JSONEachRow batch for it ("Duplicate field found"), rows before it too.
    std::set<std::string> fields;
    std::string twice;
    nlohmann::json::parser_callback_t note_field = [&fields, &twice](int depth, nlohmann::json::parse_event_t ev,
                                                                     nlohmann::json& parsed) {
      if (ev == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string() &&
          !fields.insert(parsed.get<std::string>()).second && twice.empty()) {
        twice = parsed.get<std::string>();
      }
      return true;
    };
    nlohmann::json j = nlohmann::json::parse(kv.value(), note_field, /*allow_exceptions=*/false);
    std::string reason;
    if (j.is_discarded()) {
      reason = "not JSON: ClickHouse takes one JSON object per message";
    } else if (!j.is_object()) {
      reason = "not a JSON object: ClickHouse takes one JSON object per message";
    } else if (j.contains(kQueueColumn) || j.contains(kIdxColumn)) {
      reason = "has a field " + std::string(kQueueColumn) + " or " + std::string(kIdxColumn) +
               ", which etcdq fills in (the message's queue and idx)";
    } else if (!twice.empty()) {
      reason = "names the field " + nlohmann::json(twice).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
               " twice: ClickHouse refuses a row with a duplicate field, and the rows of its batch with it";
    }
    if (!reason.empty()) {
      auto* d = a->add_assignments();
      d->set_idx(idx);
      d->set_deliveries(m.deliveries());
      d->set_reason(reason);
      continue;
    }
    // The message as it was produced (re-encoding would round big numbers
    // through doubles) with the two fields in front, on one line: a JSON
    // text has line breaks only between tokens, where a space means the
    // same.
    const std::string& v = kv.value();
    size_t brace = v.find('{');
    std::string row = "{\"" + std::string(kQueueColumn) + "\":" + queue_json + ",\"" + std::string(kIdxColumn) +
                      "\":" + std::to_string(idx);
    if (!j.empty()) row += ',';
    row.append(v, brace + 1);
    for (char& c : row) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    bytes += row.size() + 1;
    batch.push_back({idx, std::move(key), std::move(row)});
  }
  bool progressed = false;
  if (a->assignments_size() > 0) {
    a->set_queue(queue);
    if (Error e = propose_and_wait(std::move(dead))) return false;
    progressed = true;
  }
  if (batch.empty()) return progressed;

  const uint64_t epoch = seen_epoch_;
  auto known = known_high_.find(queue);
  if (known == known_high_.end()) {
    uint64_t high = 0;
    if (Error e = highest_idx(table, queue, &high)) {
      refused(queue, batch.size(), e);
      return progressed;
    }
    known = known_high_.emplace(queue, high).first;
  }
  const uint64_t high = known->second;
  // Below the highest idx ClickHouse holds, a message may be there already
  // (inserted by a leader that did not live to delete it, or before the
  // backup this data dir was restored from was taken): ask for each.
  std::vector<uint64_t> maybe;
  for (const Row& r : batch) {
    if (r.idx <= high) maybe.push_back(r.idx);
  }
  std::set<uint64_t> held;
  if (!maybe.empty()) {
    if (Error e = held_idx(table, queue, maybe, &held)) {
      refused(queue, batch.size(), e);
      return progressed;
    }
    if (!held.empty()) {
      spdlog::info("queue {}: ClickHouse already holds {} of the next {} messages (idx {} to {}); they are deleted "
                   "without inserting them again",
                   queue, held.size(), batch.size(), *held.begin(), *held.rbegin());
    }
  }
  std::string rows;
  size_t count = 0;
  uint64_t top = 0;
  for (const Row& r : batch) {
    if (held.contains(r.idx)) continue;
    rows += r.text;
    rows += '\n';
    ++count;
    top = r.idx;
  }
  if (count > 0) {
    // A leadership change since `high` was learnt: learn it again.
    if (leading_epoch_.load() != epoch || !role_leading_.load()) return progressed;
    std::string query = "INSERT INTO " + ch_backquoted(opts_.database) + "." + ch_backquoted(table) +
                        " FORMAT JSONEachRow";
    std::string ignored;
    if (Error e = request(query, rows, &ignored)) {
      // It may have landed all the same (an answer lost): ask again first,
      // and not before ClickHouse had as long again to finish it.
      known_high_.erase(queue);
      refused(queue, count, e);
      if (last_uncertain_) {
        retry_at_[queue] = std::max(retry_at_[queue], std::chrono::steady_clock::now() + kInsertTimeout);
      }
      return progressed;
    }
    known_high_[queue] = std::max(high, top);
  }
  if (told_refused_.erase(queue) > 0) spdlog::info("queue {}: ClickHouse accepts batches again", queue);
  backoff_[queue] = {};
  retry_at_.erase(queue);
  // Inserted: now remove exactly those messages (nothing newer sorts
  // between them). Retried while we lead; the next leader finds them in
  // ClickHouse and deletes them without inserting them again.
  for (;;) {
    apply::Command del;
    del.mutable_delete_range()->set_key(batch.front().key);
    del.mutable_delete_range()->set_range_end(batch.back().key + '\0');
    Error e = propose_and_wait(std::move(del));
    if (!e) return true;
    if (!role_leading_.load()) {
      spdlog::warn("queue {}: lost leadership before a batch inserted into ClickHouse was deleted ({}); the next "
                   "leader finds it there and deletes it",
                   queue, e.message());
      return false;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) return false;
  }
}

}  // namespace etcdq::queue
