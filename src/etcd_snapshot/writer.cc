#include "etcd_snapshot/writer.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "bbolt/snapshot_file.h"
#include "bbolt/writer.h"
#include "common/big_endian.h"
#include "common/crc32c.h"
#include "mvcc/codec.h"
#include "mvcc/etcd_keys.h"

namespace etcdq::etcd_snapshot {
namespace {

void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// leasepb.Lease{ID: 1, TTL: 2, RemainingTTL: 3} as gogoproto marshals it
// (zero fields omitted).
std::string lease_value(int64_t id, int64_t ttl) {
  std::string out;
  if (id != 0) {
    out.push_back(0x08);
    put_varint(&out, static_cast<uint64_t>(id));
  }
  if (ttl != 0) {
    out.push_back(0x10);
    put_varint(&out, static_cast<uint64_t>(ttl));
  }
  return out;
}

// Go's encoding/json string (it escapes <, > and & too).
void json_string(std::string* out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out->push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
      out->append("\\u00");
      out->push_back(hex[c >> 4]);
      out->push_back(hex[c & 0xf]);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

void json_list(std::string* out, const google::protobuf::RepeatedPtrField<std::string>& l) {
  out->push_back('[');
  for (int i = 0; i < l.size(); ++i) {
    if (i) out->push_back(',');
    json_string(out, l[i]);
  }
  out->push_back(']');
}

// membership.Member as json.Marshal writes it (etcd 3.4
// etcdserver/api/membership/member.go: ID, RaftAttributes, Attributes).
std::string member_json(const etcdserverpb::Member& m) {
  std::string out = "{\"id\":" + std::to_string(m.id()) + ",\"peerURLs\":";
  json_list(&out, m.peerurls());
  if (m.islearner()) out += ",\"isLearner\":true";
  if (!m.name().empty()) {
    out += ",\"name\":";
    json_string(&out, m.name());
  }
  if (m.clienturls_size() > 0) {
    out += ",\"clientURLs\":";
    json_list(&out, m.clienturls());
  }
  out.push_back('}');
  return out;
}

std::string hex_id(uint64_t id) {
  char b[17];
  snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(id));
  return b;
}

Error empty_bucket(BucketSink* out, std::string_view name) {
  if (Error e = out->begin_bucket(name)) return e;
  return out->end_bucket();
}

Error sorted_bucket(BucketSink* out, std::string_view name, const std::map<std::string, std::string>& kvs) {
  if (Error e = out->begin_bucket(name)) return e;
  for (const auto& [k, v] : kvs) {
    if (Error e = out->put(k, v)) return e;
  }
  return out->end_bucket();
}

class WriterSink final : public BucketSink {
 public:
  WriterSink(bbolt::Writer* w, const KeyProgress& on_key) : w_(w), on_key_(on_key) {}
  Error begin_bucket(std::string_view name) override {
    in_keys_ = name == "key";
    return w_->begin_bucket(name);
  }
  Error put(std::string_view key, std::string_view value) override {
    // The key bucket is in revision order: its key's first 8 bytes are the
    // main revision (big-endian, mvcc/etcd_keys.h).
    if (in_keys_ && on_key_ && (++keys_ & 255) == 0 && key.size() >= 8) {
      on_key_(static_cast<int64_t>(get_be64(key.data())), keys_);
    }
    return w_->put(key, value);
  }
  Error end_bucket() override { return w_->end_bucket(); }

 private:
  bbolt::Writer* w_;
  const KeyProgress& on_key_;
  bool in_keys_ = false;
  int64_t keys_ = 0;
};

class HashSink final : public BucketSink {
 public:
  Error begin_bucket(std::string_view name) override {
    bucket_ = name;
    h_.update(name);
    return {};
  }
  Error put(std::string_view key, std::string_view value) override {
    if (bucket_ == "meta" && key == "consistent_index") return {};  // etcd's DefaultIgnores
    h_.update(key);
    h_.update(value);
    return {};
  }
  Error end_bucket() override { return {}; }
  uint32_t value() const { return h_.value(); }

 private:
  Crc32c h_;
  std::string bucket_;
};

}  // namespace

Error write_etcd_buckets(const Tables& tables, const mvcc::ReadView& view, BucketSink* out) {
  // Bucket names in bytewise order, as bbolt's root holds them.
  std::map<std::string, std::string> alarms;
  for (const auto& a : tables.alarms) alarms[a.SerializeAsString()] = "";
  if (Error e = sorted_bucket(out, "alarm", alarms)) return e;
  // etcd's auth buckets (auth/store.go): "auth" holds authEnabled (one
  // byte) and authRevision (big-endian u64), "authUsers" and "authRoles"
  // the authpb records by name. Read from the same view as the keys
  // (auth/store.h keeps them under "auth/" in the meta column family).
  std::map<std::string, std::string> auth_meta;
  std::map<std::string, std::string> users;
  std::map<std::string, std::string> roles;
  {
    storage::Iterator it = view.bulk_iterator(storage::Cf::kMeta);
    for (it.seek("auth/"); it.valid() && it.key().starts_with("auth/"); it.next()) {
      std::string_view k = it.key();
      if (k.starts_with("auth/user/")) {
        users[std::string(k.substr(10))] = std::string(it.value());
      } else if (k.starts_with("auth/role/")) {
        roles[std::string(k.substr(10))] = std::string(it.value());
      } else {
        auth_meta[std::string(k)] = std::string(it.value());
      }
    }
  }
  std::string auth_rev;
  if (auto r = auth_meta.find("auth/revision"); r != auth_meta.end() && r->second.size() == 8) {
    auth_rev = r->second;  // stored big-endian already
  } else {
    put_be64(&auth_rev, 1);  // a fresh etcd auth store commits revision 1
  }
  std::map<std::string, std::string> auth_bucket = {{"authRevision", auth_rev}};
  if (auto en = auth_meta.find("auth/enabled"); en != auth_meta.end()) {
    auth_bucket["authEnabled"] = std::string(1, en->second == "1" ? '\1' : '\0');
  }
  if (Error e = sorted_bucket(out, "auth", auth_bucket)) return e;
  if (Error e = sorted_bucket(out, "authRoles", roles)) return e;
  if (Error e = sorted_bucket(out, "authUsers", users)) return e;
  if (Error e = sorted_bucket(out, "cluster", {{"clusterVersion", "3.4.0"}})) return e;

  if (Error e = out->begin_bucket("key")) return e;
  if (Error e = mvcc::for_each_etcd_revision(view, view.revision(), [&](const mvcc::EtcdRevision& r) {
        return out->put(r.bucket_key, r.value);
      })) {
    return e;
  }
  if (Error e = out->end_bucket()) return e;

  if (Error e = out->begin_bucket("lease")) return e;
  {
    const std::string prefix(mvcc::kLeaseTablePrefix);
    storage::Iterator it = view.bulk_iterator(storage::Cf::kMeta);
    for (it.seek(prefix); it.valid() && it.key().starts_with(prefix); it.next()) {
      std::string_view id_bytes = it.key().substr(prefix.size());
      if (id_bytes.size() != 8 || it.value().size() != 8) continue;
      uint64_t id = 0;
      for (char c : id_bytes) id = (id << 8) | static_cast<uint8_t>(c);
      if (Error e = out->put(id_bytes, lease_value(static_cast<int64_t>(id), mvcc::decode_i64(it.value())))) return e;
    }
  }
  if (Error e = out->end_bucket()) return e;

  std::map<std::string, std::string> member_kvs;
  for (const auto& m : tables.members) member_kvs[hex_id(m.id())] = member_json(m);
  if (Error e = sorted_bucket(out, "members", member_kvs)) return e;
  if (Error e = empty_bucket(out, "members_removed")) return e;

  std::map<std::string, std::string> meta;
  std::string ci;
  put_be64(&ci, view.applied_index());
  meta["consistent_index"] = ci;
  if (view.compact_revision() > 0) {
    std::string c = mvcc::etcd_revision_key({view.compact_revision(), 0}, false);
    meta["finishedCompactRev"] = c;
    meta["scheduledCompactRev"] = c;
  }
  return sorted_bucket(out, "meta", meta);
}

Error etcd_hash(const Tables& tables, const mvcc::ReadView& view, uint32_t* hash) {
  HashSink h;
  if (Error e = write_etcd_buckets(tables, view, &h)) return e;
  *hash = h.value();
  return {};
}

Error write_etcd_snapshot(const Tables& tables, const mvcc::ReadView& view, const std::string& path,
                          const KeyProgress& on_key) {
  bbolt::Writer w;  // removes its file unless finish() succeeds
  if (Error e = w.open(path)) return e;
  WriterSink sink(&w, on_key);
  if (Error e = write_etcd_buckets(tables, view, &sink)) return e;
  if (Error e = w.finish()) return e;
  if (Error e = bbolt::append_sha256_trailer(path)) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return e;
  }
  return {};
}

}  // namespace etcdq::etcd_snapshot
