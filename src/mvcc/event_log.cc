#include "mvcc/event_log.h"

#include <google/protobuf/io/coded_stream.h>

#include "mvcc/codec.h"

namespace etcdq::mvcc {

int64_t read_events(const Reader& r, int64_t from, int64_t to, size_t max_events, bool with_prev,
                    int64_t compact_revision, const std::function<bool(std::string_view key)>& want,
                    std::vector<mvccpb::Event>* out, size_t max_bytes) {
  auto log = r.iterator(storage::Cf::kRevlog);
  storage::Iterator hist;  // opened at the first event wanted
  size_t read = 0;
  size_t bytes = 0;
  int64_t cur = 0;         // the revision being read
  int64_t kept = from - 1;  // the last revision read whole and kept
  size_t kept_events = out->size();
  // `cur` has been read whole: keeps it, or drops its events when they
  // take the bytes past max_bytes and it is not the first revision.
  auto finish = [&]() {
    if (kept >= from && bytes > max_bytes) {
      out->erase(out->begin() + static_cast<std::ptrdiff_t>(kept_events), out->end());
      return false;
    }
    kept = cur;
    kept_events = out->size();
    return true;
  };
  for (log.seek(revlog_key({from, 0})); log.valid(); log.next()) {
    Revision rev = decode_revlog_key(log.key());
    if (rev.main > to) break;
    if (rev.main != cur) {
      // Stop only between revisions: a revision's events go out together.
      if (cur != 0 && (!finish() || read >= max_events || bytes >= max_bytes)) return kept;
      cur = rev.main;
    }
    ++read;
    std::string_view v = log.value();
    std::string_view key(v.data() + 1, v.size() - 1);
    if (!want(key)) continue;
    if (!hist) hist = r.iterator(storage::Cf::kHistory);
    mvccpb::Event ev;
    bool is_put = static_cast<RecordType>(v[0]) == RecordType::kPut;
    std::string hkey = history_key(key, rev);
    hist.seek(hkey);
    if (is_put) {
      ev.set_type(mvccpb::Event::PUT);
      if (hist.valid() && hist.key() == hkey && hist.value().size() > 0) {
        decode_record(hist.value().substr(1), ev.mutable_kv());
      }
    } else {
      ev.set_type(mvccpb::Event::DELETE);
      ev.mutable_kv()->set_mod_revision(rev.main);
    }
    ev.mutable_kv()->set_key(key.data(), key.size());
    if (with_prev && rev.main - 1 >= compact_revision && hist.valid()) {
      hist.next();  // the version before this one, if any is retained
      std::string k;
      Revision pr;
      if (hist.valid() && decode_history_key(hist.key(), &k, &pr) && k == key && hist.value().size() > 0 &&
          static_cast<RecordType>(hist.value()[0]) == RecordType::kPut) {
        decode_record(hist.value().substr(1), ev.mutable_prev_kv());
        ev.mutable_prev_kv()->set_key(key.data(), key.size());
      }
    }
    // As a repeated field of the response: tag, length, the event.
    size_t n = ev.ByteSizeLong();
    bytes += 1 + google::protobuf::io::CodedOutputStream::VarintSize64(n) + n;
    out->push_back(std::move(ev));
  }
  if (cur != 0 && !finish()) return kept;
  return to;
}

}  // namespace etcdq::mvcc
