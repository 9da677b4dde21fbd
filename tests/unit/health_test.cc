// http::answer_health: etcd's /health, /livez and /readyz answers
// (etcdhttp/health.go), from a member's reported state.
#include "http/health.h"

#include <gtest/gtest.h>

#include <functional>
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
  bool defer_linearizable = false;                     // linearizable reads answer when the test says
  std::vector<std::function<void(std::string)>> deferred;

  HealthSource source() {
    HealthSource s;
    s.alarms = [this] { return alarms; };
    s.has_leader = [this] { return leader; };
    s.is_learner = [this] { return learner; };
    s.read = [this](bool serializable, std::function<void(std::string)> done) {
      ++reads;
      if (!serializable && defer_linearizable) {
        deferred.push_back(std::move(done));
        return;
      }
      done(serializable ? serializable_error : linearizable_error);
    };
    return s;
  }
};

// The answer, which these sources give at once (on the asking thread).
HealthAnswer ask(State& st, const std::string& path, std::multimap<std::string, std::string> query = {},
                 const std::string& method = "GET") {
  HealthAnswer a;
  int answers = 0;
  EXPECT_TRUE(answer_health(st.source(), method, path, query, [&](HealthAnswer x) {
    a = std::move(x);
    ++answers;
  })) << path;
  EXPECT_EQ(answers, 1) << path;
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
  auto never = [](HealthAnswer) { ADD_FAILURE() << "answered an unknown path"; };
  EXPECT_FALSE(answer_health(st.source(), "GET", "/livez/nothing", {}, never));
  EXPECT_FALSE(answer_health(st.source(), "GET", "/healthz", {}, never));
  EXPECT_TRUE(is_health_path("/readyz/linearizable_read"));
  EXPECT_FALSE(is_health_path("/readyz/nothing"));
}

// A linearizable read that answers later (no quorum yet): the answer waits
// for it, nothing blocks, and the checks after it still run, in order.
TEST(Health, ReadyzAnswersWhenItsLinearizableReadDoes) {
  State st;
  st.defer_linearizable = true;
  std::vector<HealthAnswer> answers;
  auto collect = [&](HealthAnswer a) { answers.push_back(std::move(a)); };
  ASSERT_TRUE(answer_health(st.source(), "GET", "/readyz", {{"verbose", ""}}, collect));
  ASSERT_TRUE(answer_health(st.source(), "GET", "/health", {}, collect));
  ASSERT_TRUE(answer_health(st.source(), "GET", "/livez", {}, collect));  // no linearizable read: at once
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].body, "ok\n");
  ASSERT_EQ(st.deferred.size(), 2u);
  st.learner = true;
  st.deferred[0]("etcdserver: request timed out");
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].status, 503);
  EXPECT_EQ(answers[1].body,
            "[+]data_corruption ok\n[+]serializable_read ok\n"
            "[-]linearizable_read failed: etcdserver: request timed out\n"
            "[-]non_learner failed: not supported for learner\n\n");
  st.deferred[1]("");
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[2].status, 200);
  EXPECT_EQ(answers[2].body, R"({"health":"true","reason":""})");
}

}  // namespace
}  // namespace etcdq::http
