#include "mvcc/derive.h"

#include "mvcc/codec.h"

namespace etcdq::mvcc {

Error LatestFromHistory::add(std::string_view history_key, std::string_view record) {
  // Decoded into a second buffer: user_key_ still holds the previous key.
  Revision rev;
  if (!decode_history_key(history_key, &scratch_, &rev) || rev.main < 1 || rev.sub < 0) {
    return errors::internal("the snapshot has a malformed history key");
  }
  if (record.empty() || (record[0] != static_cast<char>(RecordType::kPut) &&
                         record[0] != static_cast<char>(RecordType::kDelete))) {
    return errors::internal("the snapshot has a history record that is neither a put nor a tombstone");
  }
  // Checked here, not only by the table file writer (storage/bulk_load.cc),
  // which sees one file's pairs: the newest version must come first, or
  // an older one becomes the key's latest while history says otherwise.
  if (have_key_ && history_key <= last_history_key_) {
    return errors::internal("the snapshot's history pairs are out of order");
  }
  last_history_key_.assign(history_key);
  const bool is_put = record[0] == static_cast<char>(RecordType::kPut);
  if (is_put && record.size() < 1 + 32) {
    return errors::internal("the snapshot has a history record too short for its header");
  }
  if (have_key_ && scratch_ == user_key_) return {};  // an older version of the same key
  // A key's first record is its newest: its latest one, or a tombstone.
  user_key_.swap(scratch_);
  have_key_ = true;
  if (!is_put) return {};
  ++live_keys_;
  return emit_(user_key_, record.substr(1));
}

}  // namespace etcdq::mvcc
