#include "queue/keys.h"

#include <cstdio>

namespace etcdq::queue {
namespace {

// Splits off the first segment of `s` (up to '/'); false when there is no '/'.
bool segment(std::string_view* s, std::string_view* seg) {
  size_t slash = s->find('/');
  if (slash == std::string_view::npos) return false;
  *seg = s->substr(0, slash);
  s->remove_prefix(slash + 1);
  return true;
}

bool parse_idx(std::string_view s, uint64_t* idx) {
  if (s.size() != kIdxDigits) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *idx = v;
  return v > 0;
}

// After the prefix: "{queue}/rest". Returns false when there is no queue.
bool strip_prefix(std::string_view* key) {
  if (key->starts_with("/q/")) {
    key->remove_prefix(3);
    return true;
  }
  if (key->starts_with("/queue/")) {
    key->remove_prefix(7);
    return true;
  }
  return false;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

}  // namespace

bool in_queue_space(std::string_view key) { return key.starts_with("/q/") || key.starts_with("/queue/"); }

Key parse(std::string_view key) {
  Key k;
  std::string_view rest = key;
  if (!strip_prefix(&rest)) return k;
  k.kind = KeyKind::kMalformed;
  std::string_view queue, verb;
  if (!segment(&rest, &queue) || queue.empty()) return k;
  k.queue = queue;
  if (rest == "config") {
    k.kind = KeyKind::kConfig;
    return k;
  }
  if (!segment(&rest, &verb)) {
    if (rest == "c" || rest == "consumer" || rest.empty()) return k;
    return k;  // "/q/jobs/x": nothing
  }
  if (verb == "p" || verb == "producer" || verb == "i" || verb == "input") {
    if (rest.empty()) return k;
    k.kind = KeyKind::kProduce;
    k.tail = rest;
    return k;
  }
  if (verb == "c" || verb == "consumer") {
    std::string_view consumer = rest, idx;
    if (!segment(&rest, &consumer)) {
      if (consumer.empty()) return k;
      k.kind = KeyKind::kConsumer;
      k.consumer = consumer;
      return k;
    }
    if (consumer.empty()) return k;
    k.consumer = consumer;
    if (!segment(&rest, &idx) || rest.empty() || !parse_idx(idx, &k.idx)) return k;
    k.kind = KeyKind::kConsumerAck;
    k.tail = rest;
    return k;
  }
  if (parse_idx(verb, &k.idx) && !rest.empty()) {
    k.kind = KeyKind::kMessage;
    k.tail = rest;
  }
  return k;
}

std::string message_key(std::string_view queue, uint64_t idx, std::string_view tail) {
  char digits[kIdxDigits + 1];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(idx));
  std::string k = "/q/";
  k.reserve(4 + queue.size() + kIdxDigits + 1 + tail.size());
  k.append(queue).append("/").append(digits, kIdxDigits).append("/").append(tail);
  return k;
}

std::string queue_prefix(std::string_view queue) { return "/q/" + std::string(queue) + "/"; }

std::string messages_begin(std::string_view queue, uint64_t from_idx) {
  char digits[kIdxDigits + 1];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(from_idx));
  return queue_prefix(queue) + digits;
}

// ':' follows '9': the end of every key whose next byte is a digit.
std::string messages_end(std::string_view queue) { return queue_prefix(queue) + ":"; }

std::string config_key(std::string_view queue) { return queue_prefix(queue) + "config"; }

void canonicalize_delete(std::string* key, std::string* range_end) {
  auto to_q = [](std::string* s) {
    if (s->starts_with("/queue/")) s->replace(0, 7, "/q/");
  };
  if (range_end->empty()) {
    Key k = parse(*key);
    if (k.kind == KeyKind::kConsumerAck) {
      *key = message_key(k.queue, k.idx, k.tail);
    } else {
      to_q(key);
    }
    return;
  }
  if (key->starts_with("/queue/") && range_end->starts_with("/queue/")) {
    to_q(key);
    to_q(range_end);
  }
}

void canonicalize_read(std::string* key, std::string* range_end) {
  if (!key->starts_with("/queue/")) return;
  if (!range_end->empty() && !range_end->starts_with("/queue/")) return;
  key->replace(0, 7, "/q/");
  if (!range_end->empty()) range_end->replace(0, 7, "/q/");
}

std::string dead_letter_queue(std::string_view queue) { return std::string(queue) + ".dlq"; }

bool clickhouse_table(std::string_view queue, std::string_view* table) {
  // A sink's dead letters are an ordinary queue, for people to look at.
  if (!queue.starts_with("ch:") || queue.size() == 3 || queue.ends_with(".dlq")) return false;
  *table = queue.substr(3);
  return true;
}

bool consumer_watch(std::string_view key, std::string_view range_end, Key* out) {
  std::string_view k = key;
  if (!range_end.empty()) {
    if (range_end != prefix_end(key)) return false;
    if (k.ends_with('/')) k.remove_suffix(1);
  }
  Key parsed = parse(k);
  if (parsed.kind != KeyKind::kConsumer) return false;
  *out = parsed;
  return true;
}

}  // namespace etcdq::queue
