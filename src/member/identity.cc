#include "member/identity.h"

#include <openssl/sha.h>

#include <algorithm>

#include "storage/batch.h"

namespace etcdq::member {
namespace {
uint64_t first8(const unsigned char* d) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | d[i];
  return v;
}
}  // namespace

uint64_t member_id(std::vector<std::string> peer_urls, const std::string& cluster_token) {
  std::sort(peer_urls.begin(), peer_urls.end());
  std::string b;
  for (const auto& u : peer_urls) b += u;
  b += cluster_token;
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(b.data()), b.size(), d);
  return first8(d);
}

uint64_t runtime_member_id(std::vector<std::string> peer_urls, int64_t unix_ns) {
  std::sort(peer_urls.begin(), peer_urls.end());
  std::string b;
  for (const auto& u : peer_urls) b += u;
  b += std::to_string(unix_ns);
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(b.data()), b.size(), d);
  return first8(d);
}

bool stored_cluster_token(storage::Engine* engine, std::string* token) {
  return engine->get(storage::Cf::kMeta, "cluster_token", token);
}

bool stored_member_id(storage::Engine* engine) {
  std::string m;
  return engine->get(storage::Cf::kMeta, "member_id", &m) && m.size() == 8;
}

bool keep_identity(storage::Engine* engine, uint64_t* member, uint64_t* cluster, const std::string& token) {
  const auto meta = storage::Cf::kMeta;
  std::string m, c;
  if (engine->get(meta, "member_id", &m) && m.size() == 8 && engine->get(meta, "cluster_id", &c) && c.size() == 8) {
    uint64_t sm = 0, sc = 0;
    for (int i = 0; i < 8; ++i) {
      sm = (sm << 8) | static_cast<uint8_t>(m[i]);
      sc = (sc << 8) | static_cast<uint8_t>(c[i]);
    }
    bool changed = sm != *member || sc != *cluster;
    *member = sm;
    *cluster = sc;
    return changed;
  }
  auto be = [](uint64_t v) {
    std::string s;
    for (int i = 7; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return s;
  };
  storage::Batch b(engine);
  b.put(meta, "member_id", be(*member));
  b.put(meta, "cluster_id", be(*cluster));
  b.put(meta, "cluster_token", token);
  engine->write(b);
  engine->make_durable();
  return false;
}

uint64_t cluster_id(std::vector<uint64_t> member_ids) {
  std::sort(member_ids.begin(), member_ids.end());
  std::string b;
  for (uint64_t id : member_ids) {
    for (int i = 7; i >= 0; --i) b.push_back(static_cast<char>((id >> (8 * i)) & 0xff));
  }
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(b.data()), b.size(), d);
  return first8(d);
}

}  // namespace etcdq::member
