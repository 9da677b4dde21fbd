#include "queue/book.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "queue/keys.h"

namespace etcdq::queue {
namespace {

constexpr std::string_view kMetaPrefix = "queue/";

std::string idx_digits(uint64_t idx) {
  char d[kIdxDigits + 1];
  std::snprintf(d, sizeof d, "%020llu", static_cast<unsigned long long>(idx));
  return std::string(d, kIdxDigits);
}

// A dead letter's value: one line of JSON saying what it was and why it
// was moved, then the payload exactly as produced. Nothing is escaped, so a
// message dead-lettered again (the dead-letter queue of a dead-letter
// queue) only gains one more line.
std::string dead_letter_value(std::string_view queue, uint64_t idx, std::string_view key, uint32_t deliveries,
                              const std::string& reason, const std::string& payload) {
  using nlohmann::json;
  json j = {{"queue", queue}, {"idx", idx}, {"key", key}, {"deliveries", deliveries}, {"reason", reason}};
  // Names are bytes: a broken UTF-8 sequence shows as U+FFFD in this line.
  std::string v = j.dump(-1, ' ', false, json::error_handler_t::replace);
  v += '\n';
  v += payload;
  return v;
}

}  // namespace

std::string restore_base_key() { return "queue-restore-base"; }  // sorts before kMetaPrefix
std::string counters_key(std::string_view queue) { return std::string(kMetaPrefix) + std::string(queue) + "/a"; }
std::string config_meta_key(std::string_view queue) { return std::string(kMetaPrefix) + std::string(queue) + "/c"; }
std::string message_meta_key(std::string_view queue, uint64_t idx) {
  return std::string(kMetaPrefix) + std::string(queue) + "/m/" + idx_digits(idx);
}
std::string ready_meta_key(std::string_view queue, ReadyConsumer c) {
  char d[33];
  std::snprintf(d, sizeof d, "%016llx%016llx", static_cast<unsigned long long>(c.member),
                static_cast<unsigned long long>(c.instance));
  return std::string(kMetaPrefix) + std::string(queue) + "/h/" + std::string(d, 32);
}

void Book::Queue::hold(uint64_t idx, const apply::QueueMessage& m) {
  unhold(idx);
  handed_out[idx] = m;
  if (m.member() != 0) ++holds[ReadyConsumer{m.member(), m.instance()}];
}

void Book::Queue::unhold(uint64_t idx) {
  auto it = handed_out.find(idx);
  if (it == handed_out.end()) return;
  if (it->second.member() != 0) {
    auto h = holds.find(ReadyConsumer{it->second.member(), it->second.instance()});
    if (h != holds.end() && --h->second == 0) holds.erase(h);
  }
  handed_out.erase(it);
}

Book::Book(storage::Engine* engine) : engine_(engine) { reload(); }

void Book::reload() {
  std::map<std::string, Queue, std::less<>> loaded;
  storage::Iterator it = engine_->iterator(storage::Cf::kMeta);
  for (it.seek(kMetaPrefix); it.valid(); it.next()) {
    std::string_view k = it.key();
    if (!k.starts_with(kMetaPrefix)) break;
    std::string_view rest = k.substr(kMetaPrefix.size());
    size_t slash = rest.find('/');
    if (slash == std::string_view::npos) continue;
    std::string name(rest.substr(0, slash));
    std::string_view what = rest.substr(slash + 1);
    Queue& q = loaded[name];
    std::string_view v = it.value();
    if (what == "a") {
      q.counters.ParseFromArray(v.data(), static_cast<int>(v.size()));
    } else if (what == "c") {
      Config c;
      if (!parse_config(v, &c)) q.config = c;
      q.has_config = true;
    } else if (what.starts_with("h/") && what.size() == 2 + 32) {
      ReadyConsumer c{std::strtoull(std::string(what.substr(2, 16)).c_str(), nullptr, 16),
                      std::strtoull(std::string(what.substr(18, 16)).c_str(), nullptr, 16)};
      q.ready.push_back(c);  // in key order: sorted
    } else if (what.starts_with("m/")) {
      uint64_t idx = std::strtoull(std::string(what.substr(2)).c_str(), nullptr, 10);
      if (idx > q.counters.cursor()) {
        // The rest of this queue's records were never handed out: next queue.
        std::string next = std::string(kMetaPrefix) + name + "0";  // '0' follows '/'
        it.seek(next);
        if (!it.valid()) break;
        it.prev();
        continue;
      }
      apply::QueueMessage m;
      m.ParseFromArray(v.data(), static_cast<int>(v.size()));
      q.hold(idx, m);
    }
  }
  std::set<std::string, std::less<>> nonempty;
  for (auto it = loaded.begin(); it != loaded.end();) {
    // A queue that has a config but never had a message has no counters
    // record: its first idx is 1, as for a new queue (queue_locked). Before
    // this, such a queue's first message after a restart was stored at idx
    // 0, which the key grammar does not take (keys.h: idx from 1): a data
    // dir holding one keeps its record and depth after the key is deleted.
    if (it->second.counters.next_idx() == 0) it->second.counters.set_next_idx(1);
    if (it->second.idle()) {
      it = loaded.erase(it);
      continue;
    }
    if (it->second.counters.depth() > 0) nonempty.insert(it->first);
    ++it;
  }
  fresh_.clear();
  fresh_bytes_ = 0;
  std::string base;
  restore_pending_ = false;
  restore_base_ = 0;
  if (engine_->get(storage::Cf::kMeta, restore_base_key(), &base)) {
    if (base == "pending") {
      restore_pending_ = true;
    } else {
      restore_base_ = std::strtoull(base.c_str(), nullptr, 10);
    }
  }
  fill_queues_.clear();
  entry_time_ms_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  queues_ = std::move(loaded);
  nonempty_ = std::move(nonempty);
}

void Book::remember_fresh(std::string meta_key, const apply::QueueMessage& m, mvccpb::KeyValue&& kv) {
  // Strings, protobuf, hash-node and malloc overhead: measured ~490 bytes
  // a remembered 10-byte message of a short queue name (RSS against the
  // same load without remembering).
  size_t bytes = 2 * meta_key.size() + m.tail().size() + kv.key().size() + kv.value().size() + 384;
  if (fresh_bytes_ + bytes > kFreshMaxBytes) return;
  fresh_bytes_ += bytes;
  Fresh& f = fresh_[std::move(meta_key)];
  f.record = m;
  f.kv = std::move(kv);
  f.bytes = bytes;
}

void Book::erase_fresh(FreshMap::iterator it) {
  fresh_bytes_ -= it->second.bytes;
  fresh_.erase(it);
}

Book::Queue& Book::queue_locked(mvcc::Writer& w, std::string_view name) {
  auto it = queues_.find(name);
  if (it != queues_.end()) return it->second;
  Queue q;
  std::string v;
  // Idx are never reused: a queue that was dropped from the mirror goes on
  // from its stored counters.
  if (w.get(storage::Cf::kMeta, counters_key(name), &v)) q.counters.ParseFromString(v);
  if (q.counters.next_idx() == 0) q.counters.set_next_idx(1);
  if (w.get(storage::Cf::kMeta, config_meta_key(name), &v)) {
    Config c;
    if (!parse_config(v, &c)) q.config = c;
    q.has_config = true;
  }
  return queues_.emplace(std::string(name), std::move(q)).first->second;
}

void Book::save_counters(std::string_view name) {
  // Written once per entry, in before_commit: a batch of many produces
  // would otherwise carry one counters record per message.
  if (dirty_queues_.find(name) == dirty_queues_.end()) dirty_queues_.emplace(name);
  if (changed_queues_.find(name) == changed_queues_.end()) changed_queues_.emplace(name);
  auto it = queues_.find(name);
  if (it != queues_.end() && it->second.counters.depth() > 0) {
    if (nonempty_.find(name) == nonempty_.end()) nonempty_.emplace(name);
  } else {
    auto n = nonempty_.find(name);
    if (n != nonempty_.end()) nonempty_.erase(n);
  }
  dirty_ = true;
}

void Book::begin_entry() {
  entry_time_ms_ = 0;
  fill_queues_.clear();
}

void Book::command_time(int64_t time_ms) { entry_time_ms_ = std::max(entry_time_ms_, time_ms); }

void Book::before_commit(mvcc::Writer& w) {
  if (!fill_queues_.empty()) {
    std::set<std::string, std::less<>> names;
    names.swap(fill_queues_);
    for (const auto& name : names) fill(w, name);
    fill_queues_.clear();  // what the fills' own dead letters added
  }
  if (dirty_queues_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& name : dirty_queues_) {
    auto it = queues_.find(name);
    if (it == queues_.end()) continue;
    w.put_meta(counters_key(name), it->second.counters.SerializeAsString());
    if (it->second.idle()) queues_.erase(it);
  }
  dirty_queues_.clear();
}

void Book::produce(mvcc::Writer& w, std::string_view queue, std::string_view tail, std::string_view value,
                   int64_t lease, int64_t time_ms) {
  uint64_t idx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Queue& q = queue_locked(w, queue);
    std::string_view table;
    if ((restore_pending_ || restore_base_ > 0) && clickhouse_table(queue, &table)) {
      if (restore_pending_) {
        restore_pending_ = false;
        restore_base_ = static_cast<uint64_t>(std::max<int64_t>(time_ms, 1)) * 1000;
        w.put_meta(restore_base_key(), std::to_string(restore_base_));
      }
      if (q.counters.next_idx() < restore_base_) q.counters.set_next_idx(restore_base_);
    }
    idx = q.counters.next_idx();
    q.counters.set_next_idx(idx + 1);
    q.counters.set_depth(q.counters.depth() + 1);
    q.counters.set_produced(q.counters.produced() + 1);
    save_counters(queue);
  }
  command_time(time_ms);
  if (fill_queues_.find(queue) == fill_queues_.end()) fill_queues_.emplace(queue);
  apply::QueueMessage m;
  m.set_tail(std::string(tail));
  m.set_produced_ms(time_ms);
  std::string meta_key = message_meta_key(queue, idx);
  w.put_meta(meta_key, m.SerializeAsString());
  mvccpb::KeyValue kv;
  w.put(message_key(queue, idx, tail), value, lease, nullptr, &kv);
  remember_fresh(std::move(meta_key), m, std::move(kv));
}

void Book::deleted(mvcc::Writer& w, std::string_view key) {
  Key k = parse(key);
  if (k.kind == KeyKind::kConfig) {
    w.delete_meta(config_meta_key(k.queue));
    std::lock_guard<std::mutex> lock(mu_);
    auto it = queues_.find(k.queue);
    if (it != queues_.end()) {
      it->second.config = Config{};
      it->second.has_config = false;
      save_counters(k.queue);  // may now be dropped from the mirror
    }
    dirty_ = true;
    return;
  }
  if (k.kind != KeyKind::kMessage) return;
  std::string meta_key = message_meta_key(k.queue, k.idx);
  // The record must be this key's: a plain key of the same idx with another
  // tail (written to etcd by hand, kept by a restore: queue/rebuild.h) is no
  // message, and deleting it must not drop the message's record. Checked in
  // memory when the message was handed out or is remembered, else read.
  auto fresh = fresh_.find(meta_key);
  {
    std::unique_lock<std::mutex> lock(mu_);
    const apply::QueueMessage* handed = nullptr;
    if (auto q = queues_.find(k.queue); q != queues_.end()) {
      if (auto h = q->second.handed_out.find(k.idx); h != q->second.handed_out.end()) handed = &h->second;
    }
    if (handed) {
      if (handed->tail() != k.tail) return;
    } else if (fresh != fresh_.end()) {
      if (fresh->second.record.tail() != k.tail) return;
    } else {
      lock.unlock();
      std::string rec;
      apply::QueueMessage m;
      if (!w.get(storage::Cf::kMeta, meta_key, &rec) || !m.ParseFromString(rec) || m.tail() != k.tail) return;
    }
  }
  w.delete_meta(meta_key);
  if (fresh != fresh_.end()) erase_fresh(fresh);
  std::lock_guard<std::mutex> lock(mu_);
  Queue& q = queue_locked(w, k.queue);
  q.unhold(k.idx);
  if (fill_queues_.find(k.queue) == fill_queues_.end()) fill_queues_.emplace(k.queue);
  if (q.counters.depth() > 0) q.counters.set_depth(q.counters.depth() - 1);
  if (dead_lettering_) {
    q.counters.set_dead_lettered(q.counters.dead_lettered() + 1);
  } else {
    q.counters.set_acked(q.counters.acked() + 1);
  }
  save_counters(k.queue);
}

void Book::config_put(mvcc::Writer& w, std::string_view queue, std::string_view value) {
  Config c;
  if (parse_config(value, &c)) return;  // validated before it was proposed
  w.put_meta(config_meta_key(queue), value);
  std::lock_guard<std::mutex> lock(mu_);
  Queue& q = queue_locked(w, queue);
  q.config = c;
  q.has_config = true;
  changed_queues_.emplace(queue);
  dirty_ = true;
}

void Book::dead_letter(mvcc::Writer& w, std::string_view name, uint64_t idx, const apply::QueueMessage& m,
                       const std::string& reason, int64_t time_ms) {
  std::string key = message_key(name, idx, m.tail());
  mvccpb::KeyValue kv;
  if (!w.get_latest(key, &kv)) return;
  std::string value = dead_letter_value(name, idx, key, m.deliveries(), reason, kv.value());
  dead_lettering_ = true;
  w.delete_range(key, "", nullptr);  // deleted() drops the record
  dead_lettering_ = false;
  produce(w, dead_letter_queue(name), m.tail(), value, 0, time_ms);
}

void Book::assign(mvcc::Writer& w, const apply::QueueAssign& a, int64_t time_ms) {
  std::string name = a.queue();
  command_time(time_ms);
  set_ready(w, name, a);
  for (const auto& as : a.assignments()) {
    hand_out(w, name, as.idx(), as.deliveries(), ReadyConsumer{as.member(), as.instance()}, a.deadline_ms(),
             as.reason(), time_ms);
  }
  if (fill_queues_.find(name) == fill_queues_.end()) fill_queues_.emplace(name);
}

void Book::set_ready(mvcc::Writer& w, const std::string& name, const apply::QueueAssign& a) {
  if (a.ready().empty() && a.gone().empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Queue& q = queue_locked(w, name);
  for (const auto& c : a.gone()) {
    ReadyConsumer r{c.member(), c.instance()};
    auto it = std::lower_bound(q.ready.begin(), q.ready.end(), r);
    if (it == q.ready.end() || *it != r) continue;
    q.ready.erase(it);
    w.delete_meta(ready_meta_key(name, r));
  }
  for (const auto& c : a.ready()) {
    ReadyConsumer r{c.member(), c.instance()};
    if (r.member == 0) continue;
    auto it = std::lower_bound(q.ready.begin(), q.ready.end(), r);
    if (it != q.ready.end() && *it == r) continue;
    q.ready.insert(it, r);
    w.put_meta(ready_meta_key(name, r), "");
  }
  save_counters(name);  // a queue without ready consumers may now leave the mirror
}

void Book::fill(mvcc::Writer& w, const std::string& name) {
  // No command time in this entry (none of its commands told one): the
  // leader's scheduler hands the messages out instead.
  if (entry_time_ms_ <= 0) return;
  for (;;) {
    uint64_t idx;
    ReadyConsumer to;
    int64_t deadline;
    uint64_t next_idx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = queues_.find(name);
      if (it == queues_.end()) return;
      Queue& q = it->second;
      idx = q.counters.cursor() + 1;
      next_idx = q.counters.next_idx();
      if (q.ready.empty() || idx >= next_idx) return;
      // Round-robin from replicated state only: the same pick on every member.
      size_t n = q.ready.size();
      bool found = false;
      for (size_t k = 0; k < n && !found; ++k) {
        const ReadyConsumer& c = q.ready[(idx + k) % n];
        auto h = q.holds.find(c);
        if (h == q.holds.end() || h->second < q.config.max_in_flight) {
          to = c;
          found = true;
        }
      }
      if (!found) return;
      // Messages due again go before new ones (QUEUES.md, "Redelivery"):
      // while one waits, the scheduler hands out this queue's messages.
      for (const auto& [i, m] : q.handed_out) {
        if (m.member() == 0 || m.deadline_ms() <= entry_time_ms_) return;
      }
      deadline = entry_time_ms_ + q.config.visibility_ms;
    }
    if (fresh_.find(message_meta_key(name, idx)) == fresh_.end()) {
      // Not remembered: the first message still there above the cursor (an
      // earlier one may have been deleted before it was delivered).
      storage::Iterator it = w.iterator(storage::Cf::kMeta);
      std::string from = message_meta_key(name, idx);
      std::string to_key = message_meta_key(name, next_idx);
      it.seek(from);
      if (!it.valid() || it.key().compare(to_key) >= 0) {
        // None: every message up to next_idx was handed out or deleted.
        std::lock_guard<std::mutex> lock(mu_);
        auto q = queues_.find(name);
        if (q != queues_.end()) {
          q->second.counters.set_cursor(next_idx - 1);
          save_counters(name);
        }
        return;
      }
      idx = std::strtoull(std::string(it.key().substr(from.size() - kIdxDigits)).c_str(), nullptr, 10);
    }
    if (!hand_out(w, name, idx, 0, to, deadline, {}, entry_time_ms_)) return;
  }
}

bool Book::hand_out(mvcc::Writer& w, const std::string& name, uint64_t idx, uint32_t deliveries, ReadyConsumer to,
                    int64_t deadline_ms, const std::string& reason, int64_t time_ms) {
  std::string meta_key = message_meta_key(name, idx);
  apply::QueueMessage m;
  mvccpb::KeyValue fresh_kv;
  bool fresh = false;
  if (auto f = fresh_.find(meta_key); f != fresh_.end()) {
    if (f->second.record.deliveries() != deliveries) return false;  // decided on stale state
    m = std::move(f->second.record);
    fresh_kv = std::move(f->second.kv);
    fresh = true;
    erase_fresh(f);
  } else {
    std::string rec;
    if (!w.get(storage::Cf::kMeta, meta_key, &rec)) return false;  // acked meanwhile
    if (!m.ParseFromString(rec) || m.deliveries() != deliveries) return false;  // decided on stale state
  }
  if (to.member == 0) {
    dead_letter(w, name, idx, m, reason, time_ms);
    return true;
  }
  std::string key = message_key(name, idx, m.tail());
  if (m.member() == self_ && m.instance() != 0 && m.instance() != to.instance && time_ms < m.deadline_ms()) {
    revoked_.push_back(m.instance());
  }
  m.set_deliveries(m.deliveries() + 1);
  m.set_member(to.member);
  m.set_instance(to.instance);
  m.set_deadline_ms(deadline_ms);
  w.put_meta(meta_key, m.SerializeAsString());
  {
    std::lock_guard<std::mutex> lock(mu_);
    Queue& q = queue_locked(w, name);
    if (idx > q.counters.cursor() + 1) {
      // Messages skipped on the way (a lost decision) join the handed-out
      // set undelivered, so they are delivered next.
      storage::Iterator it = w.iterator(storage::Cf::kMeta);
      std::string from = message_meta_key(name, q.counters.cursor() + 1);
      std::string to_key = message_meta_key(name, idx);
      for (it.seek(from); it.valid() && it.key().compare(to_key) < 0; it.next()) {
        uint64_t skipped = std::strtoull(std::string(it.key().substr(from.size() - kIdxDigits)).c_str(), nullptr, 10);
        apply::QueueMessage sm;
        sm.ParseFromArray(it.value().data(), static_cast<int>(it.value().size()));
        q.hold(skipped, sm);
      }
    }
    if (idx > q.counters.cursor()) q.counters.set_cursor(idx);
    q.hold(idx, m);
    q.counters.set_delivered(q.counters.delivered() + 1);
    if (m.deliveries() > 1) q.counters.set_redelivered(q.counters.redelivered() + 1);
    save_counters(name);
  }
  if (to.member == self_ && deliver_) {
    Delivery d;
    d.instance = to.instance;
    d.queue = name;
    if (fresh) {
      d.kv = std::move(fresh_kv);
      pending_.push_back(std::move(d));
    } else if (w.get_latest(key, &d.kv)) {
      pending_.push_back(std::move(d));
    }
  }
  return true;
}

void Book::committed(int64_t revision) {
  if (!revoked_.empty()) {
    std::vector<uint64_t> out;
    out.swap(revoked_);
    if (revoke_) revoke_(std::move(out));
  }
  if (!pending_.empty()) {
    for (auto& d : pending_) d.revision = revision;
    std::vector<Delivery> out;
    out.swap(pending_);
    deliver_(std::move(out));
  }
  if (dirty_) {
    dirty_ = false;
    std::vector<std::string> names(changed_queues_.begin(), changed_queues_.end());
    changed_queues_.clear();
    if (changed_) changed_(std::move(names));
  }
}

std::vector<std::string> Book::nonempty_queues() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {nonempty_.begin(), nonempty_.end()};
}

std::vector<std::string> Book::queues() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, q] : queues_) out.push_back(name);
  return out;
}

bool Book::view(std::string_view queue, QueueView* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = queues_.find(queue);
  if (it == queues_.end()) return false;
  out->name = it->first;
  out->config = it->second.config;
  out->counters = it->second.counters;
  out->handed_out = it->second.handed_out;
  out->ready = it->second.ready;
  return true;
}

int64_t Book::oldest_produced_ms(std::string_view queue) const {
  uint64_t cursor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = queues_.find(queue);
    if (it == queues_.end()) return 0;
    if (!it->second.handed_out.empty()) return it->second.handed_out.begin()->second.produced_ms();
    cursor = it->second.counters.cursor();
  }
  storage::Iterator it = engine_->iterator(storage::Cf::kMeta);
  std::string from = message_meta_key(queue, cursor + 1);
  std::string prefix = from.substr(0, from.size() - kIdxDigits);
  it.seek(from);
  if (!it.valid() || !it.key().starts_with(prefix)) return 0;
  apply::QueueMessage m;
  m.ParseFromArray(it.value().data(), static_cast<int>(it.value().size()));
  return m.produced_ms();
}

}  // namespace etcdq::queue
