#include "mvcc/etcd_keys.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "common/big_endian.h"
#include "common/crc32c.h"
#include "etcd/api/mvccpb/kv.pb.h"

namespace etcdq::mvcc {
namespace {

bool is_put(std::string_view record) {
  return !record.empty() && static_cast<RecordType>(record[0]) == RecordType::kPut;
}

// The newest version of `user_key` at or below main revision `at`, if any.
bool newest_at(storage::Iterator& it, const std::string& user_key, int64_t at, Revision* rev, bool* put) {
  it.seek(history_key(user_key, {at, INT64_MAX}));
  if (!it.valid()) return false;
  std::string k;
  if (!decode_history_key(it.key(), &k, rev) || k != user_key) return false;
  *put = is_put(it.value());
  return true;
}

struct Kept {
  Revision rev;
  std::string key;
  bool kept_at_upto;
};

// The revisions etcd keeps at compact revision `compact` (each live key's
// newest put at or below it), in revision order; and whether any key is
// live at `upto`.
void scan_kept(const ReadView& view, int64_t compact, int64_t upto, std::vector<Kept>* kept, bool* any_live) {
  *any_live = false;
  storage::Iterator it = view.bulk_iterator(storage::Cf::kHistory);
  std::string user_key;
  Revision r;
  it.seek_to_first();
  while (it.valid()) {
    if (!decode_history_key(it.key(), &user_key, &r)) {
      it.next();
      continue;
    }
    Revision at_upto, at_compact;
    bool put_upto = false, put_compact = false;
    bool has_upto = newest_at(it, user_key, upto, &at_upto, &put_upto);
    if (has_upto && put_upto) *any_live = true;
    if (newest_at(it, user_key, compact, &at_compact, &put_compact) && put_compact) {
      kept->push_back({at_compact, user_key, has_upto && at_upto == at_compact});
    }
    it.seek(history_key_after(user_key));
  }
  std::sort(kept->begin(), kept->end(), [](const Kept& a, const Kept& b) { return a.rev < b.rev; });
}

Error corrupt_record(std::string_view key, Revision r) {
  return Error(Code::kInternal, "mvcc: no readable record of key " + std::string(key) + " at revision " +
                                    std::to_string(r.main) + "_" + std::to_string(r.sub));
}

// The marshalled KeyValue of `user_key` at `r` (history record `record`:
// type byte, then codec.h's value record).
bool etcd_value(std::string_view user_key, std::string_view record, std::string* out) {
  mvccpb::KeyValue kv;
  if (is_put(record)) {
    if (!decode_record(record.substr(1), &kv)) return false;
  }
  kv.set_key(user_key.data(), user_key.size());
  out->clear();
  return kv.SerializeToString(out);
}

}  // namespace

std::string etcd_revision_key(Revision rev, bool tombstone) {
  std::string out;
  out.reserve(18);
  put_be64(&out, static_cast<uint64_t>(rev.main));
  out.push_back('_');
  put_be64(&out, static_cast<uint64_t>(rev.sub));
  if (tombstone) out.push_back('t');
  return out;
}

Error for_each_etcd_revision(const ReadView& view, int64_t upto, const std::function<Error(const EtcdRevision&)>& fn) {
  const int64_t compact = view.compact_revision();
  std::vector<Kept> kept;
  bool any_live = false;
  if (compact > 0) scan_kept(view, compact, upto, &kept, &any_live);

  std::string record, value, bucket_key;
  for (auto& k : kept) {
    if (k.rev.main > upto) break;
    if (!view.bulk_get(storage::Cf::kHistory, history_key(k.key, k.rev), &record) || !is_put(record) ||
        !etcd_value(k.key, record, &value)) {
      return corrupt_record(k.key, k.rev);
    }
    bucket_key = etcd_revision_key(k.rev, false);
    EtcdRevision e{k.rev, false, k.key, bucket_key, value, k.kept_at_upto || !any_live};
    if (Error err = fn(e)) return err;
    std::string().swap(k.key);  // handed out: give the memory back early
  }
  std::vector<Kept>().swap(kept);

  storage::Iterator log = view.bulk_iterator(storage::Cf::kRevlog);
  const std::string stop = revlog_key({upto + 1, 0});
  for (log.seek(revlog_key({compact + 1, 0})); log.valid() && log.key().compare(stop) < 0; log.next()) {
    Revision r = decode_revlog_key(log.key());
    std::string_view entry = log.value();
    if (entry.empty()) return corrupt_record("", r);
    std::string user_key(entry.substr(1));
    bool tombstone = static_cast<RecordType>(entry[0]) == RecordType::kDelete;
    if (!view.bulk_get(storage::Cf::kHistory, history_key(user_key, r), &record) || is_put(record) == tombstone ||
        !etcd_value(user_key, record, &value)) {
      return corrupt_record(user_key, r);
    }
    bucket_key = etcd_revision_key(r, tombstone);
    EtcdRevision e{r, tombstone, user_key, bucket_key, value, true};
    if (Error err = fn(e)) return err;
  }
  return {};
}

Error etcd_hash_kv(const ReadView& view, int64_t rev, uint32_t* hash) {
  const int64_t compact = view.compact_revision();
  if (rev > 0 && rev <= compact) return errors::compacted();
  if (rev > view.revision()) return errors::future_rev();
  if (rev <= 0) rev = view.revision();
  Crc32c h;
  h.update("key");
  if (Error e = for_each_etcd_revision(view, rev, [&](const EtcdRevision& r) -> Error {
        if (r.kept_at_upto) {
          h.update(r.bucket_key);
          h.update(r.value);
        }
        return {};
      })) {
    return e;
  }
  *hash = h.value();
  return {};
}

}  // namespace etcdq::mvcc
