// http::answer_health: etcd's /health, /livez and /readyz answers
// (etcdhttp/health.go), from a member's reported state.
#include "http/health.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace etcdq::http {
namespace {

struct State {
  std::vector<std::string> alarms;
  bool leader = true;
  bool learner = false;
  std::string serializable_error, linearizable_error;
  int reads = 0;

  HealthSource source() {
    HealthSource s;
    s.alarms = [this] { return alarms; };
    s.has_leader = [this] { return leader; };
    s.is_learner = [this] { return learner; };
    s.read = [this](bool serializable) {
      ++reads;
      return serializable ? serializable_error : linearizable_error;
    };
    return s;
  }
};

HealthAnswer ask(State& st, const std::string& path, std::multimap<std::string, std::string> query = {},
                 const std::string& method = "GET") {
  HealthAnswer a;
  EXPECT_TRUE(answer_health(st.source(), method, path, query, &a)) << path;
  return a;
}

TEST(Health, HealthyMember) {
  State st;
  HealthAnswer a = ask(st, "/health");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, R"({"health":"true","reason":""})");
  EXPECT_EQ(st.reads, 1);  // the check reads, as etcd's does
}

TEST(Health, AlarmsComeFirstAndCanBeExcluded) {
  State st;
  st.alarms = {"NOSPACE"};
  st.leader = false;
  HealthAnswer a = ask(st, "/health");
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.body, "{\"health\":\"false\",\"reason\":\"ALARM NOSPACE\"}\n");
  EXPECT_EQ(st.reads, 0);
  a = ask(st, "/health", {{"exclude", "NOSPACE"}});
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.body, "{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}\n");
  st.alarms = {"CORRUPT"};
  EXPECT_EQ(ask(st, "/health", {{"exclude", "NOSPACE"}}).body,
            "{\"health\":\"false\",\"reason\":\"ALARM CORRUPT\"}\n");
}

TEST(Health, SerializableSkipsTheLeaderAndReadsLocally) {
  State st;
  st.leader = false;
  st.linearizable_error = "etcdserver: request timed out";
  HealthAnswer a = ask(st, "/health", {{"serializable", "true"}});
  EXPECT_EQ(a.status, 200) << a.body;
  st.leader = true;
  a = ask(st, "/health");
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.body, "{\"health\":\"false\",\"reason\":\"RANGE ERROR:etcdserver: request timed out\"}\n");
}

TEST(Health, LivezAndReadyz) {
  State st;
  HealthAnswer a = ask(st, "/livez");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "ok\n");
  a = ask(st, "/readyz", {{"verbose", ""}});
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body,
            "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\nok\n");

  st.linearizable_error = "etcdserver: request timed out";
  st.learner = true;
  a = ask(st, "/readyz");
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(a.body,
            "[+]data_corruption ok\n[+]serializable_read ok\n"
            "[-]linearizable_read failed: etcdserver: request timed out\n"
            "[-]non_learner failed: not supported for learner\n\n");
  a = ask(st, "/readyz", {{"exclude", "linearizable_read"}, {"exclude", "non_learner"}});
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(ask(st, "/livez").status, 200);  // a live process, whatever the cluster
  EXPECT_EQ(ask(st, "/readyz/serializable_read").status, 200);
  EXPECT_EQ(ask(st, "/readyz/non_learner").status, 503);

  st.alarms = {"CORRUPT"};
  EXPECT_EQ(ask(st, "/readyz/data_corruption").body, "[-]data_corruption failed: alarm activated: CORRUPT\n\n");
}

TEST(Health, OnlyGetAndOnlyKnownPaths) {
  State st;
  HealthAnswer a = ask(st, "/health", {}, "POST");
  EXPECT_EQ(a.status, 405);
  EXPECT_TRUE(a.allow_get_header);
  EXPECT_EQ(a.body, "Method Not Allowed\n");
  EXPECT_EQ(st.reads, 0);
  HealthAnswer b;
  EXPECT_FALSE(answer_health(st.source(), "GET", "/livez/nothing", {}, &b));
  EXPECT_FALSE(answer_health(st.source(), "GET", "/healthz", {}, &b));
}

}  // namespace
}  // namespace etcdq::http
