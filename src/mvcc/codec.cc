#include "mvcc/codec.h"

#include <cstring>

#include "common/big_endian.h"

namespace etcdq::mvcc {
namespace {

void put_le64(std::string* out, int64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);  // x86-64 and aarch64 are little-endian
  out->append(b, 8);
}

int64_t get_le64(const char* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void append_escaped(std::string* out, std::string_view key) {
  for (char c : key) {
    out->push_back(c);
    if (c == '\0') out->push_back('\xff');
  }
}

constexpr size_t kRecordHeader = 32;

}  // namespace

void encode_record(const mvccpb::KeyValue& kv, std::string* out) {
  out->reserve(out->size() + kRecordHeader + kv.value().size());
  put_le64(out, kv.create_revision());
  put_le64(out, kv.mod_revision());
  put_le64(out, kv.version());
  put_le64(out, kv.lease());
  out->append(kv.value());
}

bool decode_record(std::string_view in, mvccpb::KeyValue* kv) {
  if (in.size() < kRecordHeader) return false;
  kv->set_create_revision(get_le64(in.data()));
  kv->set_mod_revision(get_le64(in.data() + 8));
  kv->set_version(get_le64(in.data() + 16));
  kv->set_lease(get_le64(in.data() + 24));
  kv->set_value(in.data() + kRecordHeader, in.size() - kRecordHeader);
  return true;
}

std::string history_key(std::string_view user_key, Revision rev) {
  std::string out;
  out.reserve(user_key.size() + 20);
  append_escaped(&out, user_key);
  out.push_back('\0');
  out.push_back('\x01');
  put_be64(&out, ~static_cast<uint64_t>(rev.main));
  put_be64(&out, ~static_cast<uint64_t>(rev.sub));
  return out;
}

std::string history_key_first(std::string_view user_key) {
  std::string out;
  append_escaped(&out, user_key);
  out.push_back('\0');
  out.push_back('\x01');
  return out;
}

std::string history_key_after(std::string_view user_key) {
  std::string out;
  append_escaped(&out, user_key);
  out.push_back('\0');
  out.push_back('\x02');
  return out;
}

bool decode_history_key(std::string_view hkey, std::string* user_key, Revision* rev) {
  user_key->clear();
  size_t i = 0;
  while (i + 1 < hkey.size()) {
    char c = hkey[i];
    if (c == '\0') {
      if (hkey[i + 1] == '\xff') {
        user_key->push_back('\0');
        i += 2;
        continue;
      }
      if (hkey[i + 1] != '\x01' || hkey.size() != i + 2 + 16) return false;
      rev->main = static_cast<int64_t>(~get_be64(hkey.data() + i + 2));
      rev->sub = static_cast<int64_t>(~get_be64(hkey.data() + i + 10));
      return true;
    }
    user_key->push_back(c);
    ++i;
  }
  return false;
}

std::string revlog_key(Revision rev) {
  std::string out;
  put_be64(&out, static_cast<uint64_t>(rev.main));
  put_be64(&out, static_cast<uint64_t>(rev.sub));
  return out;
}

Revision decode_revlog_key(std::string_view rkey) {
  if (rkey.size() != 16) return {};
  return {static_cast<int64_t>(get_be64(rkey.data())), static_cast<int64_t>(get_be64(rkey.data() + 8))};
}

std::string lease_table_key(int64_t id) {
  std::string out(kLeaseTablePrefix);
  put_be64(&out, static_cast<uint64_t>(id));
  return out;
}

std::string lease_index_prefix(int64_t id) {
  std::string out = "lkey/";
  put_be64(&out, static_cast<uint64_t>(id));
  return out;
}

std::string lease_index_key(int64_t id, std::string_view user_key) {
  std::string out = lease_index_prefix(id);
  out.append(user_key);
  return out;
}

std::string encode_i64(int64_t v) {
  std::string out;
  put_le64(&out, v);
  return out;
}

int64_t decode_i64(std::string_view s) { return s.size() == 8 ? get_le64(s.data()) : 0; }

}  // namespace etcdq::mvcc
