#include "mvcc/range.h"

#include "mvcc/metrics.h"

#include "mvcc/codec.h"

namespace etcdq::mvcc {
namespace {

bool is_from_key(std::string_view end) { return end.size() == 1 && end[0] == '\0'; }

// Is `k` past the end of the range that started at a key <= k?
bool past_end(std::string_view k, std::string_view end) {
  if (end.empty() || is_from_key(end)) return false;
  return k >= end;
}

class Collector {
 public:
  Collector(const RangeOptions& o, RangeResult* out) : opts_(o), out_(out) {}
  bool wants_value() const {
    return !opts_.count_only && (opts_.limit <= 0 || static_cast<int64_t>(out_->kvs.size()) < opts_.limit);
  }
  void add(std::string_view key, std::string_view record) {
    ++out_->count;
    if (!wants_value()) return;
    mvccpb::KeyValue kv;
    decode_record(record, &kv);
    kv.set_key(key.data(), key.size());
    out_->kvs.push_back(std::move(kv));
  }

 private:
  const RangeOptions& opts_;
  RangeResult* out_;
};

void range_latest(const Reader& r, std::string_view key, std::string_view end, Collector& c) {
  if (end.empty()) {
    std::string rec;
    if (r.get(storage::Cf::kLatest, key, &rec)) c.add(key, rec);
    return;
  }
  auto it = r.iterator(storage::Cf::kLatest);
  for (it.seek(key); it.valid(); it.next()) {
    std::string_view k = it.key();
    if (past_end(k, end)) break;
    c.add(k, it.value());
  }
}

// The newest version at or below `rev` of each key, skipping keys whose
// newest such version is a tombstone.
void range_history(const Reader& r, std::string_view key, std::string_view end, int64_t rev,
                   Collector& c) {
  auto it = r.iterator(storage::Cf::kHistory);
  std::string user_key;
  Revision found;
  std::string seek = history_key(key, {rev, INT64_MAX});
  it.seek(seek);
  while (it.valid()) {
    std::string_view hk = it.key();
    if (!decode_history_key(hk, &user_key, &found)) break;  // not an MVCC key: corrupt
    if (end.empty() ? user_key != key : (user_key < key || past_end(user_key, end))) break;
    if (found.main > rev) {
      // Versions newer than `rev`: jump to this key's newest version <= rev.
      it.seek(history_key(user_key, {rev, INT64_MAX}));
      if (!it.valid()) break;
      std::string k2;
      Revision r2;
      if (!decode_history_key(it.key(), &k2, &r2)) break;
      if (k2 != user_key) continue;  // no version of user_key at or below rev
      found = r2;
    }
    std::string_view v = it.value();
    if (v.size() > 0 && static_cast<RecordType>(v[0]) == RecordType::kPut) {
      c.add(user_key, std::string_view(v.data() + 1, v.size() - 1));
    }
    if (end.empty()) break;
    it.seek(history_key_after(user_key));
  }
}

}  // namespace

std::vector<std::string> keys_of_lease(const Reader& reader, int64_t id) {
  std::vector<std::string> keys;
  std::string prefix = lease_index_prefix(id);
  auto it = reader.iterator(storage::Cf::kMeta);
  for (it.seek(prefix); it.valid() && it.key().starts_with(prefix); it.next()) {
    keys.emplace_back(it.key().substr(prefix.size()));
  }
  return keys;
}

bool in_range(std::string_view k, std::string_view key, std::string_view end) {
  if (end.empty()) return k == key;
  return k >= key && !past_end(k, end);
}

Error range(const Reader& reader, std::string_view key, std::string_view end,
            const RangeOptions& opts, int64_t current_rev, int64_t compact_rev, RangeResult* out) {
  mvcc_metrics().range.Increment();
  return range_uncounted(reader, key, end, opts, current_rev, compact_rev, out);
}

Error range_uncounted(const Reader& reader, std::string_view key, std::string_view end,
                      const RangeOptions& opts, int64_t current_rev, int64_t compact_rev, RangeResult* out) {
  int64_t rev = opts.rev;
  if (rev > current_rev) return errors::future_rev();
  if (rev <= 0) rev = current_rev;
  if (rev < compact_rev) return errors::compacted();
  out->rev = current_rev;
  Collector c(opts, out);
  if (rev == current_rev) {
    range_latest(reader, key, end, c);
  } else {
    range_history(reader, key, end, rev, c);
  }
  return {};
}

}  // namespace etcdq::mvcc
