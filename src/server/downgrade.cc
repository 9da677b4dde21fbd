#include "server/downgrade.h"

#include <charconv>
#include <regex>

#include <spdlog/spdlog.h>

namespace etcdq::server {

namespace {

// go-semver's validateIdentifier: dot-separated runs of [0-9A-Za-z-].
bool valid_identifier(std::string_view id) {
  if (id.empty()) return true;
  static const std::regex kIdentifier("^[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*$");
  return std::regex_match(id.begin(), id.end(), kIdentifier);
}

// Go's strconv.ParseInt(s, 10, 64): an optional sign, then decimal digits.
bool parse_int64(std::string_view s, int64_t* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// go-semver's splitOff: the part after the first `sep`, removed from *s.
std::string_view split_off(std::string_view* s, char sep) {
  size_t i = s->find(sep);
  if (i == std::string_view::npos) return {};
  std::string_view tail = s->substr(i + 1);
  *s = s->substr(0, i);
  return tail;
}

bool less(const SemVer& a, int64_t major, int64_t minor) {
  return a.major != major ? a.major < major : a.minor < minor;
}

}  // namespace

bool parse_semver(std::string_view text, SemVer* out) {
  std::string_view v = text;
  std::string_view metadata = split_off(&v, '+');
  std::string_view pre = split_off(&v, '-');
  // strings.SplitN(version, ".", 3): the third part keeps any further dots.
  size_t d1 = v.find('.');
  if (d1 == std::string_view::npos) return false;
  size_t d2 = v.find('.', d1 + 1);
  if (d2 == std::string_view::npos) return false;
  if (!valid_identifier(pre) || !valid_identifier(metadata)) return false;
  SemVer r;
  if (!parse_int64(v.substr(0, d1), &r.major) || !parse_int64(v.substr(d1 + 1, d2 - d1 - 1), &r.minor) ||
      !parse_int64(v.substr(d2 + 1), &r.patch)) {
    return false;
  }
  *out = r;
  return true;
}

Error parse_downgrade_target(std::string_view text, SemVer* out) {
  if (!parse_semver(text, out) && !parse_semver(std::string(text) + ".0", out)) {
    return errors::wrong_downgrade_version_format();
  }
  out->patch = 0;
  return {};
}

std::string cluster_version(std::string_view api_version) {
  SemVer v;
  if (!parse_semver(api_version, &v)) return std::string(api_version);
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}

std::string storage_version(std::string_view api_version) {
  SemVer v;
  if (!parse_semver(api_version, &v) || less(v, 3, 6)) return {};
  return std::to_string(v.major) + "." + std::to_string(v.minor) + ".0";
}

namespace {
// etcd logs the refusal and answers success (v3_server.go downgradeCancel).
void log_cancel_without_job() {
  const Error why = errors::no_inflight_downgrade();
  spdlog::warn("failed to cancel downgrade: {}", why.message());
}
}  // namespace

// Written with ifs and one Error: a switch with a logged temporary in one
// case made clang 14 (the sanitizer builds) destroy that temporary on the
// other cases' return paths too, which ASan caught as stack-use-after-scope.
Error answer_downgrade(std::string_view api_version, const etcdserverpb::DowngradeRequest& req,
                       etcdserverpb::DowngradeResponse* resp) {
  SemVer cluster;
  parse_semver(api_version, &cluster);
  const auto action = req.action();
  if (action == etcdserverpb::DowngradeRequest::CANCEL) {
    log_cancel_without_job();
    resp->set_version(cluster_version(api_version));
    return Error();
  }
  if (action != etcdserverpb::DowngradeRequest::VALIDATE && action != etcdserverpb::DowngradeRequest::ENABLE) {
    // etcd's ErrUnknownMethod, as togRPCError passes it on (Unknown).
    return Error(Code::kUnknown, "etcdserver: unknown method");
  }
  SemVer target;
  Error err = parse_downgrade_target(req.version(), &target);
  if (!err && (target.major != cluster.major || target.minor != cluster.minor - 1)) {
    // version.go allowedDowngradeVersion: the minor version just below.
    err = errors::invalid_downgrade_target_version();
  }
  if (!err && action == etcdserverpb::DowngradeRequest::ENABLE) {
    err = errors::downgrade_not_supported(std::to_string(target.major) + "." + std::to_string(target.minor));
    spdlog::warn("reject downgrade request: {}", err.message());
  }
  if (!err) resp->set_version(cluster_version(api_version));
  return err;
}

}  // namespace etcdq::server
