#include "http/health.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <utility>

namespace etcdq::http {
namespace {

constexpr const char* kTextPlain = "text/plain; charset=utf-8";

std::set<std::string> values_of(const std::multimap<std::string, std::string>& query, const std::string& key) {
  std::set<std::string> out;
  auto range = query.equal_range(key);
  for (auto it = range.first; it != range.second; ++it) {
    if (!it->second.empty()) out.insert(it->second);
  }
  return out;
}

std::string first_value(const std::multimap<std::string, std::string>& query, const std::string& key) {
  auto it = query.find(key);
  return it == query.end() ? "" : it->second;
}

// One named check of /livez or /readyz: "" when it passes, else why not.
using Check = std::function<std::string(const HealthSource&)>;

std::string alarm_check(const HealthSource& src, const std::string& alarm) {
  auto alarms = src.alarms();
  if (std::find(alarms.begin(), alarms.end(), alarm) != alarms.end()) return "alarm activated: " + alarm;
  return "";
}

// In the order they are listed and run (etcd keeps them in a Go map, so
// its order varies from call to call).
const std::vector<std::pair<std::string, Check>>& checks_of(const std::string& kind) {
  static const std::vector<std::pair<std::string, Check>> livez = {
      {"serializable_read", [](const HealthSource& s) { return s.read(true); }},
  };
  static const std::vector<std::pair<std::string, Check>> readyz = {
      {"data_corruption", [](const HealthSource& s) { return alarm_check(s, "CORRUPT"); }},
      {"serializable_read", [](const HealthSource& s) { return s.read(true); }},
      {"linearizable_read", [](const HealthSource& s) { return s.read(false); }},
      {"non_learner",
       [](const HealthSource& s) { return s.is_learner() ? std::string("not supported for learner") : std::string(); }},
  };
  return kind == "livez" ? livez : readyz;
}

void method_not_allowed(HealthAnswer* out) {
  out->status = 405;
  out->content_type = kTextPlain;
  out->body = "Method Not Allowed\n";
  out->allow_get_header = true;
}

void health(const HealthSource& src, const std::multimap<std::string, std::string>& query, HealthAnswer* out) {
  std::set<std::string> excluded = values_of(query, "exclude");
  bool serializable = first_value(query, "serializable") == "true";
  std::string reason;
  for (const auto& alarm : src.alarms()) {
    if (excluded.count(alarm)) continue;
    reason = alarm == "NOSPACE" || alarm == "CORRUPT" ? "ALARM " + alarm : "ALARM UNKNOWN";
    break;
  }
  if (reason.empty() && !serializable && !src.has_leader()) reason = "RAFT NO LEADER";
  if (reason.empty()) {
    std::string err = src.read(serializable);
    if (!err.empty()) reason = "RANGE ERROR:" + err;
  }
  nlohmann::json j = {{"health", reason.empty() ? "true" : "false"}, {"reason", reason}};
  out->body = j.dump();
  if (reason.empty()) {
    out->status = 200;
    out->content_type = kTextPlain;  // what Go's ResponseWriter sniffs for it
  } else {
    out->status = 503;
    out->content_type = kTextPlain;
    out->body += "\n";  // http.Error's
  }
}

void checks(const HealthSource& src, const std::string& kind, const std::string& only,
            const std::multimap<std::string, std::string>& query, HealthAnswer* out) {
  std::set<std::string> excluded = only.empty() ? values_of(query, "exclude") : std::set<std::string>{};
  std::string report;
  bool failed = false;
  for (const auto& [name, check] : checks_of(kind)) {
    if (!only.empty() && name != only) continue;
    if (excluded.count(name)) continue;
    std::string err = check(src);
    if (err.empty()) {
      report += "[+]" + name + " ok\n";
    } else {
      report += "[-]" + name + " failed: " + err + "\n";
      failed = true;
    }
  }
  out->content_type = kTextPlain;
  if (failed) {
    out->status = 503;
    out->body = report + "\n";  // http.Error's newline
    return;
  }
  out->status = 200;
  out->body = (query.count("verbose") ? report : std::string()) + "ok\n";
}

}  // namespace

bool health_may_wait(const std::string& request) {
  size_t sp = request.find(' ');
  if (sp == std::string::npos) return false;
  size_t end = request.find_first_of(" \r\n", sp + 1);
  std::string target = request.substr(sp + 1, end == std::string::npos ? std::string::npos : end - sp - 1);
  size_t q = target.find('?');
  std::string path = target.substr(0, q);
  std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  if (path == "/health") return query.find("serializable=true") == std::string::npos;
  return path == "/readyz" || path == "/readyz/linearizable_read";
}

bool answer_health(const HealthSource& src, const std::string& method, const std::string& path,
                   const std::multimap<std::string, std::string>& query, HealthAnswer* out) {
  std::string kind, only;
  if (path == "/health") {
    kind = "health";
  } else {
    for (const char* k : {"livez", "readyz"}) {
      std::string root = std::string("/") + k;
      if (path == root) {
        kind = k;
      } else if (path.rfind(root + "/", 0) == 0) {
        std::string name = path.substr(root.size() + 1);
        for (const auto& entry : checks_of(k)) {
          if (entry.first == name) {
            kind = k;
            only = name;
          }
        }
      }
    }
  }
  if (kind.empty()) return false;
  if (method != "GET") {
    method_not_allowed(out);
    return true;
  }
  if (kind == "health") {
    health(src, query, out);
  } else {
    checks(src, kind, only, query, out);
  }
  return true;
}

}  // namespace etcdq::http
