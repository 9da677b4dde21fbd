#include "queue/clickhouse.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <future>
#include <nlohmann/json.hpp>

#include "common/thread_name.h"
#include "mvcc/codec.h"
#include "queue/keys.h"

namespace etcdq::queue {
namespace {

std::string backquoted(std::string_view name) {
  std::string out = "`";
  for (char c : name) {
    if (c == '`' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "`";
}

std::string url_encode(std::string_view s) {
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
  role_leading_ = leading;
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void ClickHouseSink::run() {
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

Error ClickHouseSink::insert(std::string_view table, const std::string& rows) {
  httplib::Client cli(opts_.url);
  cli.set_connection_timeout(std::chrono::seconds(2));
  cli.set_read_timeout(kInsertTimeout);
  cli.set_write_timeout(kInsertTimeout);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return errors::stopped();
    active_ = &cli;
  }
  std::string query = "INSERT INTO " + backquoted(opts_.database) + "." + backquoted(table) + " FORMAT JSONEachRow";
  auto res = cli.Post("/?query=" + url_encode(query), rows, "application/x-ndjson");
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = nullptr;
  }
  if (!res) {
    return {Code::kUnavailable,
            "no answer from ClickHouse at " + opts_.url + " (" + httplib::to_string(res.error()) + " error)"};
  }
  if (res->status != 200) {
    std::string body = res->body.substr(0, 300);
    while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
    return {Code::kUnavailable, "ClickHouse answered " + std::to_string(res->status) + ": " + body};
  }
  return {};
}

bool ClickHouseSink::drain(const std::string& queue, std::string_view table) {
  auto view = store_->view();
  std::string prefix = message_meta_key(queue, 0);
  prefix.resize(prefix.size() - kIdxDigits);
  storage::Iterator it = view->iterator(storage::Cf::kMeta);
  std::string rows, first_key, last_key;
  size_t count = 0;
  apply::Command dead;
  auto* a = dead.mutable_queue_assign();
  for (it.seek(prefix); it.valid() && it.key().starts_with(prefix); it.next()) {
    if (count >= kMaxBatchRows || rows.size() >= kMaxBatchBytes) break;
    uint64_t idx = std::strtoull(std::string(it.key().substr(prefix.size())).c_str(), nullptr, 10);
    apply::QueueMessage m;
    if (!m.ParseFromArray(it.value().data(), static_cast<int>(it.value().size()))) continue;
    std::string key = message_key(queue, idx, m.tail());
    std::string rec;
    mvccpb::KeyValue kv;
    if (!view->get(storage::Cf::kLatest, key, &rec) || !mvcc::decode_record(rec, &kv)) continue;
    nlohmann::json j = nlohmann::json::parse(kv.value(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      auto* d = a->add_assignments();
      d->set_idx(idx);
      d->set_deliveries(m.deliveries());
      d->set_reason(j.is_discarded() ? "not JSON: ClickHouse takes one JSON object per message"
                                     : "not a JSON object: ClickHouse takes one JSON object per message");
      continue;
    }
    // The message as it was produced (re-encoding would round big numbers
    // through doubles), on one line: a JSON text has line breaks only
    // between tokens, where a space means the same.
    size_t at = rows.size();
    rows += kv.value();
    for (size_t i = at; i < rows.size(); ++i) {
      if (rows[i] == '\n' || rows[i] == '\r') rows[i] = ' ';
    }
    rows += '\n';
    if (first_key.empty()) first_key = key;
    last_key = key;
    ++count;
  }
  bool progressed = false;
  if (a->assignments_size() > 0) {
    a->set_queue(queue);
    if (Error e = propose_and_wait(std::move(dead))) return false;
    progressed = true;
  }
  if (count == 0) return progressed;
  if (Error e = insert(table, rows)) {
    auto& b = backoff_[queue];
    if (b.count() == 0) {
      spdlog::warn("queue {}: ClickHouse did not take a batch of {} rows: {}; the messages stay queued and are retried",
                   queue, count, e.message());
      b = kMinBackoff;
    } else {
      b = std::min(b * 2, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxBackoff));
    }
    retry_at_[queue] = std::chrono::steady_clock::now() + b;
    return progressed;
  }
  if (backoff_[queue].count() != 0) spdlog::info("queue {}: ClickHouse accepts batches again", queue);
  backoff_[queue] = {};
  retry_at_.erase(queue);
  // Inserted: now remove exactly those messages (nothing newer sorts
  // between them). Retried while we lead, or ClickHouse gets them twice.
  for (;;) {
    apply::Command del;
    del.mutable_delete_range()->set_key(first_key);
    del.mutable_delete_range()->set_range_end(last_key + '\0');
    Error e = propose_and_wait(std::move(del));
    if (!e) return true;
    if (!role_leading_.load()) {
      spdlog::warn("queue {}: lost leadership before a batch inserted into ClickHouse was deleted ({}); the next "
                   "leader inserts it again",
                   queue, e.message());
      return false;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) return false;
  }
}

}  // namespace etcdq::queue
