#include "server/identity.h"

#include <openssl/sha.h>

#include <algorithm>

namespace etcdq::server {
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

}  // namespace etcdq::server
