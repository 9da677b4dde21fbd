#include "http/health.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
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

// One named check of /livez or /readyz: gives `done` "" when it passes,
// else why not.
using Done = std::function<void(std::string)>;
using Check = std::function<void(const HealthSource&, Done)>;

std::string alarm_check(const HealthSource& src, const std::string& alarm) {
  auto alarms = src.alarms();
  if (std::find(alarms.begin(), alarms.end(), alarm) != alarms.end()) return "alarm activated: " + alarm;
  return "";
}

// In the order they are listed and run (etcd keeps them in a Go map, so
// its order varies from call to call).
const std::vector<std::pair<std::string, Check>>& checks_of(const std::string& kind) {
  static const std::vector<std::pair<std::string, Check>> livez = {
      {"serializable_read", [](const HealthSource& s, Done d) { s.read(true, std::move(d)); }},
  };
  static const std::vector<std::pair<std::string, Check>> readyz = {
      {"data_corruption", [](const HealthSource& s, Done d) { d(alarm_check(s, "CORRUPT")); }},
      {"serializable_read", [](const HealthSource& s, Done d) { s.read(true, std::move(d)); }},
      {"linearizable_read", [](const HealthSource& s, Done d) { s.read(false, std::move(d)); }},
      {"non_learner",
       [](const HealthSource& s, Done d) {
         d(s.is_learner() ? std::string("not supported for learner") : std::string());
       }},
  };
  return kind == "livez" ? livez : readyz;
}

void method_not_allowed(HealthAnswer* out) {
  out->status = 405;
  out->content_type = kTextPlain;
  out->body = "Method Not Allowed\n";
  out->allow_get_header = true;
}

void health(const HealthSource& src, const std::multimap<std::string, std::string>& query,
            std::function<void(HealthAnswer)> done) {
  std::set<std::string> excluded = values_of(query, "exclude");
  bool serializable = first_value(query, "serializable") == "true";
  std::string reason;
  for (const auto& alarm : src.alarms()) {
    if (excluded.count(alarm)) continue;
    reason = alarm == "NOSPACE" || alarm == "CORRUPT" ? "ALARM " + alarm : "ALARM UNKNOWN";
    break;
  }
  if (reason.empty() && !serializable && !src.has_leader()) reason = "RAFT NO LEADER";
  auto answer = [done = std::move(done)](std::string reason) {
    HealthAnswer out;
    nlohmann::json j = {{"health", reason.empty() ? "true" : "false"}, {"reason", reason}};
    out.body = j.dump();
    out.content_type = kTextPlain;  // what Go's ResponseWriter sniffs for it
    if (reason.empty()) {
      out.status = 200;
    } else {
      out.status = 503;
      out.body += "\n";  // http.Error's
    }
    done(std::move(out));
  };
  if (!reason.empty()) return answer(reason);
  src.read(serializable, [answer = std::move(answer)](std::string err) {
    answer(err.empty() ? std::string() : "RANGE ERROR:" + err);
  });
}

// The checks of one /livez or /readyz request, run one after another
// (each may answer later); the report is complete when the last one is in.
struct CheckRun : std::enable_shared_from_this<CheckRun> {
  HealthSource src;  // a copy: a read may end after the server that asked is gone
  std::vector<const std::pair<std::string, Check>*> todo;
  size_t next = 0;
  std::string report;
  bool failed = false;
  bool verbose = false;
  std::function<void(HealthAnswer)> done;

  void run() {
    if (next == todo.size()) return finish();
    auto self = shared_from_this();
    todo[next]->second(src, [self](std::string err) {
      const std::string& name = self->todo[self->next]->first;
      if (err.empty()) {
        self->report += "[+]" + name + " ok\n";
      } else {
        self->report += "[-]" + name + " failed: " + err + "\n";
        self->failed = true;
      }
      ++self->next;
      self->run();
    });
  }

  void finish() {
    HealthAnswer out;
    out.content_type = kTextPlain;
    if (failed) {
      out.status = 503;
      out.body = report + "\n";  // http.Error's newline
    } else {
      out.status = 200;
      out.body = (verbose ? report : std::string()) + "ok\n";
    }
    done(std::move(out));
  }
};

void checks(const HealthSource& src, const std::string& kind, const std::string& only,
            const std::multimap<std::string, std::string>& query, std::function<void(HealthAnswer)> done) {
  std::set<std::string> excluded = only.empty() ? values_of(query, "exclude") : std::set<std::string>{};
  auto run = std::make_shared<CheckRun>();
  run->src = src;
  run->verbose = query.count("verbose") > 0;
  run->done = std::move(done);
  for (const auto& entry : checks_of(kind)) {
    if (!only.empty() && entry.first != only) continue;
    if (excluded.count(entry.first)) continue;
    run->todo.push_back(&entry);
  }
  run->run();
}

}  // namespace

bool is_health_path(const std::string& path) {
  if (path == "/health") return true;
  for (const char* k : {"livez", "readyz"}) {
    std::string root = std::string("/") + k;
    if (path == root) return true;
    if (path.rfind(root + "/", 0) == 0) {
      std::string name = path.substr(root.size() + 1);
      for (const auto& entry : checks_of(k)) {
        if (entry.first == name) return true;
      }
    }
  }
  return false;
}

bool answer_health(const HealthSource& src, const std::string& method, const std::string& path,
                   const std::multimap<std::string, std::string>& query, std::function<void(HealthAnswer)> done) {
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
    HealthAnswer out;
    method_not_allowed(&out);
    done(std::move(out));
    return true;
  }
  if (kind == "health") {
    health(src, query, std::move(done));
  } else {
    checks(src, kind, only, query, std::move(done));
  }
  return true;
}

}  // namespace etcdq::http
