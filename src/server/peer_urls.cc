#include "server/peer_urls.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>

namespace etcdq::server {
namespace {

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }
int unhex(char c) { return std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10); }
bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// Go's shouldEscape(c, encodeHost) is false for these (and for letters and digits).
bool host_char(char c) {
  return is_alnum(c) || std::string_view("!$&'()*+,;=:[]<>\"-_.~").find(c) != std::string_view::npos;
}

enum class Mode { kHost, kZone, kOther };

// Go's net/url unescape: the text with %XX decoded, or nothing when an escape
// is malformed or, in a host, when a byte is not allowed there.
std::optional<std::string> unescape(std::string_view s, Mode mode) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size() || !is_hex(s[i + 1]) || !is_hex(s[i + 2])) return std::nullopt;
      char v = static_cast<char>(unhex(s[i + 1]) << 4 | unhex(s[i + 2]));
      bool pct25 = s.substr(i, 3) == "%25";
      // In a host only non-ASCII bytes may be escaped (RFC 3986), and %25 for
      // an IPv6 zone (RFC 6874); a zone may escape what a host could hold.
      if (mode == Mode::kHost && unhex(s[i + 1]) < 8 && !pct25) return std::nullopt;
      if (mode == Mode::kZone && !pct25 && v != ' ' && !host_char(v)) return std::nullopt;
      out.push_back(v);
      i += 3;
      continue;
    }
    if (mode != Mode::kOther && static_cast<unsigned char>(c) < 0x80 && !host_char(c)) return std::nullopt;
    out.push_back(c);
    ++i;
  }
  return out;
}

// ":digits", or nothing.
bool valid_optional_port(std::string_view p) {
  if (p.empty()) return true;
  if (p[0] != ':') return false;
  return std::all_of(p.begin() + 1, p.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// Go's url.parseHost: the unescaped host, or nothing.
std::optional<std::string> parse_host(std::string_view host) {
  if (!host.empty() && host[0] == '[') {
    size_t i = host.rfind(']');
    if (i == std::string_view::npos) return std::nullopt;
    if (!valid_optional_port(host.substr(i + 1))) return std::nullopt;
    size_t zone = host.substr(0, i).find("%25");
    if (zone == std::string_view::npos) return unescape(host, Mode::kHost);
    auto a = unescape(host.substr(0, zone), Mode::kHost);
    auto b = unescape(host.substr(zone, i - zone), Mode::kZone);
    auto c = unescape(host.substr(i), Mode::kHost);
    if (!a || !b || !c) return std::nullopt;
    return *a + *b + *c;
  }
  if (size_t i = host.rfind(':'); i != std::string_view::npos && !valid_optional_port(host.substr(i))) {
    return std::nullopt;
  }
  return unescape(host, Mode::kHost);
}

// Go's net.SplitHostPort succeeds.
bool splits_into_host_and_port(std::string_view hp) {
  size_t i = hp.rfind(':');
  if (i == std::string_view::npos) return false;  // missing port
  size_t j = 0, k = 0;
  if (hp[0] == '[') {
    size_t end = hp.find(']');
    if (end == std::string_view::npos || end + 1 != i) return false;
    j = 1;
    k = end + 1;
  } else if (hp.substr(0, i).find(':') != std::string_view::npos) {
    return false;  // too many colons
  }
  return hp.find('[', j) == std::string_view::npos && hp.find(']', k) == std::string_view::npos;
}

bool userinfo_ok(std::string_view u) {
  for (char c : u) {
    if (!is_alnum(c) && std::string_view("-._:~!$&'()*+,;=%@").find(c) == std::string_view::npos) return false;
  }
  return unescape(u, Mode::kOther).has_value();
}

// One URL as etcd's types.NewURLs takes it (Go's url.Parse, then scheme,
// host:port and empty path). Sets the normalized URL and "host:port".
bool parse_one(std::string_view s, std::string* normalized, std::string* address) {
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;  // control characters
  }
  std::string_view rest = s;
  if (size_t hash = rest.find('#'); hash != std::string_view::npos) {
    if (!unescape(rest.substr(hash + 1), Mode::kOther)) return false;
    rest = rest.substr(0, hash);
  }
  // The scheme: a letter, then letters, digits, '+', '-' or '.', then ':'.
  size_t colon = 0;
  while (colon < rest.size() && (is_alnum(rest[colon]) || std::string_view("+-.").find(rest[colon]) !=
                                                                 std::string_view::npos)) {
    ++colon;
  }
  if (colon == 0 || colon == rest.size() || rest[colon] != ':' || !std::isalpha(static_cast<unsigned char>(rest[0]))) {
    return false;  // no scheme
  }
  std::string scheme(rest.substr(0, colon));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  if (scheme != "http" && scheme != "https") return false;  // etcd also takes unix and unixs; etcdq cannot reach those
  rest = rest.substr(colon + 1);
  if (size_t q = rest.find('?'); q != std::string_view::npos) rest = rest.substr(0, q);  // a query is not checked
  if (rest.substr(0, 2) != "//") return false;  // no host
  rest = rest.substr(2);
  size_t slash = rest.find('/');
  if (slash != std::string_view::npos) return false;  // a path, even "/"
  std::string_view authority = rest;
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    if (!userinfo_ok(authority.substr(0, at))) return false;
    authority = authority.substr(at + 1);
  }
  auto host = parse_host(authority);
  if (!host || !splits_into_host_and_port(*host)) return false;
  *normalized = scheme + std::string(s.substr(colon));
  *address = std::string(authority);
  return true;
}

}  // namespace

Error parse_peer_urls(const std::vector<std::string>& urls, PeerUrls* out) {
  if (urls.empty()) return errors::member_bad_urls();
  out->urls.clear();
  for (size_t i = 0; i < urls.size(); ++i) {
    std::string normalized, address;
    if (!parse_one(urls[i], &normalized, &address)) return errors::member_bad_urls();
    if (i == 0) out->address = address;
    out->urls.push_back(std::move(normalized));
  }
  std::sort(out->urls.begin(), out->urls.end());
  return {};
}

}  // namespace etcdq::server
