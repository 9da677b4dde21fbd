// etcd's health endpoints (server/etcdserver/api/etcdhttp/health.go, etcd
// 3.5 for /health, 3.6 for /livez and /readyz), answered from what the
// member reports through HealthSource:
//
//   GET /health[?exclude=NOSPACE][&serializable=true]
//     {"health":"true","reason":""} (200), or "false" with the first
//     failing check (503): an active alarm not excluded ("ALARM NOSPACE",
//     "ALARM CORRUPT"), no leader ("RAFT NO LEADER", unless serializable),
//     or a one-key Range failing ("RANGE ERROR:<etcd's error>"; local when
//     serializable, else linearizable).
//   GET /livez    serializable_read
//   GET /readyz   data_corruption, serializable_read, linearizable_read,
//                 non_learner
//     "ok\n" (200; with ?verbose, "[+]<check> ok" lines first) or the
//     "[-]<check> failed: <reason>" lines (503). ?exclude=<check> skips one;
//     /livez/<check> and /readyz/<check> run one.
// Any other method gets etcd's 405 with "Allow: GET".
//
// Nothing here blocks: a linearizable read is asked for with a callback,
// and the answer is given through one when every check is in (the HTTP
// server sends it when it comes, costing no thread meanwhile; server.h).
//
// Thread-safety: answer_health() from any thread; the source's functions
// are called on the caller's thread or, after a read, on the thread that
// completed it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace etcdq::http {

struct HealthSource {
  std::function<std::vector<std::string>()> alarms;  // active alarms by etcd's names: "NOSPACE", "CORRUPT"
  std::function<bool()> has_leader;
  std::function<bool()> is_learner;
  // A keys-only Range of one key; `done` gets "" when it succeeded, else
  // etcd's error message ("etcdserver: request timed out"). `done` runs
  // exactly once, on this thread or another, within etcd's request
  // timeout.
  std::function<void(bool serializable, std::function<void(std::string)> done)> read;
};

struct HealthAnswer {
  int status = 200;
  std::string content_type;
  std::string body;
  bool allow_get_header = false;  // 405: "Allow: GET"
};

// `path` is /health, /livez, /readyz or /livez/<check>, /readyz/<check>;
// `query` maps each parameter to its values, in order. Returns false for a
// path that is none of these (the caller answers 404; `done` never runs);
// else `done` runs once with the answer, on this thread when no check had
// to wait, else on the thread that completed the last read.
bool answer_health(const HealthSource& src, const std::string& method, const std::string& path,
                   const std::multimap<std::string, std::string>& query, std::function<void(HealthAnswer)> done);

// Whether a path (without its query) is one answer_health() serves.
bool is_health_path(const std::string& path);

}  // namespace etcdq::http
