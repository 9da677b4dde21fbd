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
// Thread-safety: answer() from any thread; the source's functions are
// called on the caller's thread, and `read` may block up to etcd's request
// timeout (a linearizable read without quorum).
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
  // A keys-only Range of one key: "" when it succeeded, else etcd's error
  // message ("etcdserver: request timed out").
  std::function<std::string(bool serializable)> read;
};

struct HealthAnswer {
  int status = 200;
  std::string content_type;
  std::string body;
  bool allow_get_header = false;  // 405: "Allow: GET"
};

// `path` is /health, /livez, /readyz or /livez/<check>, /readyz/<check>;
// `query` maps each parameter to its values, in order. Returns false for a
// path that is none of these (the caller answers 404).
bool answer_health(const HealthSource& src, const std::string& method, const std::string& path,
                   const std::multimap<std::string, std::string>& query, HealthAnswer* out);

// Whether an HTTP request (its bytes, request line first) is a health check
// that may wait on the cluster: a linearizable /health or /readyz. The
// server runs those on workers of their own (connections.h).
bool health_may_wait(const std::string& request);

}  // namespace etcdq::http
