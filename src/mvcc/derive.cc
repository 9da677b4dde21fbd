#include "mvcc/derive.h"

#include <algorithm>

namespace etcdq::mvcc {

Error HistoryDeriver::add(std::string_view history_key, std::string_view record) {
  // Decoded into a second buffer: user_key_ still holds the previous key.
  std::string& key = scratch_;
  Revision rev;
  if (!decode_history_key(history_key, &key, &rev) || rev.main < 1 || rev.sub < 0) {
    return errors::internal("the snapshot has a malformed history key");
  }
  if (record.empty() || (record[0] != static_cast<char>(RecordType::kPut) &&
                         record[0] != static_cast<char>(RecordType::kDelete))) {
    return errors::internal("the snapshot has a history record that is neither a put nor a tombstone");
  }
  const bool is_put = record[0] == static_cast<char>(RecordType::kPut);
  if (is_put && record.size() < 1 + 32) {
    return errors::internal("the snapshot has a history record too short for its header");
  }
  const bool new_key = !have_key_ || key != user_key_;
  if (new_key) {
    // History comes newest first within a key: its first record is the
    // latest one (writer.cc), and the key is gone if it is a tombstone.
    user_key_.swap(key);
    have_key_ = true;
    key_kept_ = false;
    if (is_put) {
      ++live_keys_;
      if (Error e = emit_(storage::Cf::kLatest, user_key_, record.substr(1))) return e;
    }
  }
  if (rev.main >= revlog_from_) {
    if (!key_kept_) {
      keys_.append(user_key_);
      key_kept_ = true;
    }
    changes_.push_back(
        {rev, keys_.size() - user_key_.size(), static_cast<uint32_t>(user_key_.size()), record[0]});
  }
  return {};
}

Error HistoryDeriver::finish() {
  std::sort(changes_.begin(), changes_.end(), [](const Change& a, const Change& b) { return a.rev < b.rev; });
  std::string value;
  for (size_t i = 0; i < changes_.size(); ++i) {
    const Change& c = changes_[i];
    if (i > 0 && changes_[i - 1].rev == c.rev) {
      return errors::internal("the snapshot has two history records at revision " + std::to_string(c.rev.main) +
                              "_" + std::to_string(c.rev.sub));
    }
    value.assign(1, c.type);
    value.append(keys_, c.key_at, c.key_len);
    if (Error e = emit_(storage::Cf::kRevlog, revlog_key(c.rev), value)) return e;
  }
  changes_.clear();
  keys_.clear();
  return {};
}

}  // namespace etcdq::mvcc
