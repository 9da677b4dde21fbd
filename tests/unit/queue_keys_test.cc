// The queue key grammar (src/queue/keys.h) and per-queue config parsing
// (src/queue/config.h): every spelling, every malformed form, the helpers
// that build keys and ranges, and the config JSON rules.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "queue/config.h"
#include "queue/keys.h"

namespace etcdq::queue {
namespace {

std::string prefix_end_of(std::string s) {
  while (!s.empty()) {
    if (static_cast<unsigned char>(s.back()) < 0xff) {
      s.back() = static_cast<char>(s.back() + 1);
      return s;
    }
    s.pop_back();
  }
  return std::string(1, '\0');
}

const char* kIdx1 = "00000000000000000001";
const char* kIdx42 = "00000000000000000042";

// ---- produce -------------------------------------------------------------

TEST(QueueKeys, ProduceEverySpellingAndPrefix) {
  for (const char* prefix : {"/q/", "/queue/"}) {
    for (const char* verb : {"p", "producer", "i", "input"}) {
      std::string key = std::string(prefix) + "jobs/" + verb + "/a";
      Key k = parse(key);
      EXPECT_EQ(k.kind, KeyKind::kProduce) << key;
      EXPECT_EQ(k.queue, "jobs") << key;
      EXPECT_EQ(k.tail, "a") << key;
      EXPECT_EQ(k.idx, 0u) << key;
      EXPECT_TRUE(in_queue_space(key)) << key;
    }
  }
}

TEST(QueueKeys, ProduceTailMayHoldSlashes) {
  Key k = parse("/q/jobs/p/a/b/c");
  EXPECT_EQ(k.kind, KeyKind::kProduce);
  EXPECT_EQ(k.queue, "jobs");
  EXPECT_EQ(k.tail, "a/b/c");
  // A tail that looks like another verb is still just a tail.
  k = parse("/q/jobs/p/c/u");
  EXPECT_EQ(k.kind, KeyKind::kProduce);
  EXPECT_EQ(k.tail, "c/u");
  std::string idx_tail = "/q/jobs/p/" + std::string(kIdx1) + "/x";  // parse's views point into it
  k = parse(idx_tail);
  EXPECT_EQ(k.kind, KeyKind::kProduce);
  EXPECT_EQ(k.tail, std::string(kIdx1) + "/x");
}

TEST(QueueKeys, ViewsPointIntoTheKey) {
  std::string key = "/queue/jobs/producer/tail";
  Key k = parse(key);
  ASSERT_EQ(k.kind, KeyKind::kProduce);
  EXPECT_GE(k.queue.data(), key.data());
  EXPECT_LT(k.queue.data(), key.data() + key.size());
  EXPECT_EQ(k.tail.data() + k.tail.size(), key.data() + key.size());
}

TEST(QueueKeys, QueueNamesWithDotsAndColons) {
  Key k = parse("/q/jobs.dlq/p/x");
  EXPECT_EQ(k.kind, KeyKind::kProduce);
  EXPECT_EQ(k.queue, "jobs.dlq");
  k = parse("/q/ch:events/p/x");
  EXPECT_EQ(k.kind, KeyKind::kProduce);
  EXPECT_EQ(k.queue, "ch:events");
}

// ---- consumers -------------------------------------------------------------

TEST(QueueKeys, ConsumerEverySpellingAndPrefix) {
  for (const char* prefix : {"/q/", "/queue/"}) {
    for (const char* verb : {"c", "consumer"}) {
      std::string key = std::string(prefix) + "jobs/" + verb + "/3f2a-uuid";
      Key k = parse(key);
      EXPECT_EQ(k.kind, KeyKind::kConsumer) << key;
      EXPECT_EQ(k.queue, "jobs") << key;
      EXPECT_EQ(k.consumer, "3f2a-uuid") << key;
    }
  }
}

TEST(QueueKeys, ConsumerScopedAckEverySpelling) {
  for (const char* prefix : {"/q/", "/queue/"}) {
    for (const char* verb : {"c", "consumer"}) {
      std::string key = std::string(prefix) + "jobs/" + verb + "/u1/" + kIdx42 + "/t/x";
      Key k = parse(key);
      EXPECT_EQ(k.kind, KeyKind::kConsumerAck) << key;
      EXPECT_EQ(k.queue, "jobs") << key;
      EXPECT_EQ(k.consumer, "u1") << key;
      EXPECT_EQ(k.idx, 42u) << key;
      EXPECT_EQ(k.tail, "t/x") << key;
    }
  }
}

TEST(QueueKeys, MalformedConsumerForms) {
  for (const std::string& key : std::vector<std::string>{
           "/q/jobs/c/",                                      // empty consumer
           "/q/jobs/c//" + std::string(kIdx1) + "/t",         // empty consumer before an ack
           "/q/jobs/c/u/x",                                   // neither consumer nor ack
           "/q/jobs/c/u/" + std::string(kIdx1),               // ack without a tail
           "/q/jobs/c/u/" + std::string(kIdx1) + "/",         // ack with an empty tail
           "/q/jobs/c/u/123/t",                               // idx not 20 digits
           "/q/jobs/c/u/00000000000000000000/t",              // idx 0
           "/q/jobs/c/u/0000000000000000000x/t",              // non-digit idx
           "/q/jobs/consumer/",
       }) {
    EXPECT_EQ(parse(key).kind, KeyKind::kMalformed) << key;
  }
}

// ---- messages ----------------------------------------------------------------

TEST(QueueKeys, MessageKeys) {
  for (const char* prefix : {"/q/", "/queue/"}) {
    std::string key = std::string(prefix) + "jobs/" + kIdx42 + "/a/b";
    Key k = parse(key);
    EXPECT_EQ(k.kind, KeyKind::kMessage) << key;
    EXPECT_EQ(k.queue, "jobs");
    EXPECT_EQ(k.idx, 42u);
    EXPECT_EQ(k.tail, "a/b");
  }
  Key k = parse("/q/jobs/18446744073709551615/t");  // UINT64_MAX, 20 digits
  EXPECT_EQ(k.kind, KeyKind::kMessage);
  EXPECT_EQ(k.idx, 18446744073709551615ull);
}

TEST(QueueKeys, MalformedMessageForms) {
  for (const std::string& key : std::vector<std::string>{
           "/q/jobs/" + std::string(kIdx1),                // no tail
           "/q/jobs/" + std::string(kIdx1) + "/",          // empty tail
           "/q/jobs/1/t",                                  // idx not 20 digits
           "/q/jobs/0000000000000000001/t",                // 19 digits
           "/q/jobs/000000000000000000001/t",              // 21 digits
           "/q/jobs/00000000000000000000/t",               // idx 0
           "/q/jobs/0000000000000000000a/t",               // non-digit
           "/q/jobs/-0000000000000000001/t",               // sign
           "/q/jobs/99999999999999999999/t",               // past UINT64_MAX
           "/q/jobs/18446744073709551616/t",               // UINT64_MAX + 1
       }) {
    EXPECT_EQ(parse(key).kind, KeyKind::kMalformed) << key;
  }
}

// ---- config, plain and malformed ------------------------------------------------

TEST(QueueKeys, ConfigKey) {
  for (const char* key : {"/q/jobs/config", "/queue/jobs/config"}) {
    Key k = parse(key);
    EXPECT_EQ(k.kind, KeyKind::kConfig) << key;
    EXPECT_EQ(k.queue, "jobs") << key;
  }
  EXPECT_EQ(parse("/q/jobs/config/x").kind, KeyKind::kMalformed);
  EXPECT_EQ(parse("/q/jobs/configs").kind, KeyKind::kMalformed);
  EXPECT_EQ(config_key("jobs"), "/q/jobs/config");
}

TEST(QueueKeys, PlainKeysOutsideQueueSpace) {
  for (const char* key : {"", "/", "/q", "/queue", "q/jobs/p/a", "/qx/jobs/p/a", "/queues/jobs/p/a",
                          "/Q/jobs/p/a", "foo", "/q_/jobs/p/a", "//q/jobs/p/a"}) {
    EXPECT_EQ(parse(key).kind, KeyKind::kPlain) << key;
    EXPECT_FALSE(in_queue_space(key)) << key;
  }
}

TEST(QueueKeys, MalformedInQueueSpace) {
  for (const char* key : {
           "/q/",                 // nothing after the prefix
           "/queue/",
           "/q//p/x",             // empty queue
           "/queue//p/x",
           "/q//config",
           "/q/jobs",             // queue without anything after it
           "/q/jobs/",            // nothing after the queue
           "/q/jobs/p",           // produce without a tail
           "/q/jobs/p/",          // produce with an empty tail
           "/q/jobs/producer/",
           "/q/jobs/i/",
           "/queue/jobs/input/",
           "/q/jobs/x",           // unknown verb, no tail
           "/q/jobs/x/y",         // unknown verb
           "/q/jobs/c",           // consume without a consumer
           "/q/jobs/consumer",
       }) {
    EXPECT_EQ(parse(key).kind, KeyKind::kMalformed) << key;
    EXPECT_TRUE(in_queue_space(key)) << key;
  }
}

// ---- builders -------------------------------------------------------------------

TEST(QueueKeys, MessageKeyIsZeroPaddedAndParsesBack) {
  EXPECT_EQ(message_key("jobs", 1, "a"), "/q/jobs/00000000000000000001/a");
  EXPECT_EQ(message_key("jobs", 42, "x/y"), "/q/jobs/00000000000000000042/x/y");
  EXPECT_EQ(message_key("jobs", 18446744073709551615ull, "t"), "/q/jobs/18446744073709551615/t");
  for (uint64_t idx : {1ull, 9ull, 10ull, 123456789ull, 18446744073709551615ull}) {
    std::string key = message_key("q1", idx, "tail");
    Key k = parse(key);
    EXPECT_EQ(k.kind, KeyKind::kMessage) << key;
    EXPECT_EQ(k.idx, idx) << key;
    EXPECT_EQ(k.queue, "q1");
    EXPECT_EQ(k.tail, "tail");
  }
  // Byte order is FIFO order.
  EXPECT_LT(message_key("jobs", 9, "z"), message_key("jobs", 10, "a"));
  EXPECT_LT(message_key("jobs", 99, "z"), message_key("jobs", 100, "a"));
}

TEST(QueueKeys, QueuePrefixAndMessagesRange) {
  EXPECT_EQ(queue_prefix("jobs"), "/q/jobs/");
  EXPECT_EQ(messages_begin("jobs", 1), "/q/jobs/00000000000000000001");
  EXPECT_EQ(messages_begin("jobs", 0), "/q/jobs/00000000000000000000");
  std::string begin = messages_begin("jobs", 5), end = messages_end("jobs");
  EXPECT_LT(begin, end);
  auto in_range = [&](const std::string& k) { return begin <= k && k < end; };
  EXPECT_TRUE(in_range(message_key("jobs", 5, "a")));
  EXPECT_TRUE(in_range(message_key("jobs", 6, "a")));
  EXPECT_TRUE(in_range(message_key("jobs", 18446744073709551615ull, "a")));
  EXPECT_FALSE(in_range(message_key("jobs", 4, "zzzz")));
  // Not messages: config, consumers, other queues, the dead-letter queue.
  EXPECT_FALSE(in_range("/q/jobs/config"));
  EXPECT_FALSE(in_range("/q/jobs/c/u"));
  EXPECT_FALSE(in_range("/q/jobs/consumer/u"));
  EXPECT_FALSE(in_range(message_key("jobs.dlq", 7, "a")));
  EXPECT_FALSE(in_range(message_key("jobs2", 7, "a")));
  EXPECT_FALSE(in_range(message_key("job", 7, "a")));
  // The whole range of messages from 1 holds every message.
  std::string all_begin = messages_begin("jobs", 1);
  EXPECT_LE(all_begin, message_key("jobs", 1, "a"));
}

TEST(QueueKeys, DeadLetterAndClickhouse) {
  EXPECT_EQ(dead_letter_queue("jobs"), "jobs.dlq");
  std::string dlq_message = message_key(dead_letter_queue("jobs"), 3, "t");
  EXPECT_EQ(dlq_message, "/q/jobs.dlq/00000000000000000003/t");
  EXPECT_EQ(parse(dlq_message).kind, KeyKind::kMessage);
  EXPECT_EQ(parse(dlq_message).queue, "jobs.dlq");
  std::string_view table;
  EXPECT_TRUE(clickhouse_table("ch:events", &table));
  EXPECT_EQ(table, "events");
  EXPECT_FALSE(clickhouse_table("ch:", &table));
  EXPECT_FALSE(clickhouse_table("events", &table));
  EXPECT_FALSE(clickhouse_table("ch", &table));
}

// ---- canonicalize_delete ------------------------------------------------------------

TEST(QueueKeys, CanonicalizeDeleteSingleKeys) {
  struct Case {
    std::string in, out;
  } cases[] = {
      {"/q/jobs/" + std::string(kIdx42) + "/t", "/q/jobs/" + std::string(kIdx42) + "/t"},
      {"/queue/jobs/" + std::string(kIdx42) + "/t", "/q/jobs/" + std::string(kIdx42) + "/t"},
      {"/q/jobs/c/u1/" + std::string(kIdx42) + "/t/x", "/q/jobs/" + std::string(kIdx42) + "/t/x"},
      {"/q/jobs/consumer/u1/" + std::string(kIdx42) + "/t", "/q/jobs/" + std::string(kIdx42) + "/t"},
      {"/queue/jobs/c/u1/" + std::string(kIdx42) + "/t", "/q/jobs/" + std::string(kIdx42) + "/t"},
      {"/queue/jobs/consumer/u1/" + std::string(kIdx42) + "/t", "/q/jobs/" + std::string(kIdx42) + "/t"},
      {"/queue/jobs/config", "/q/jobs/config"},
      {"plain", "plain"},
      {"/qx/a", "/qx/a"},
      {"/queuex/a", "/queuex/a"},
  };
  for (const auto& c : cases) {
    std::string key = c.in, end;
    canonicalize_delete(&key, &end);
    EXPECT_EQ(key, c.out) << c.in;
    EXPECT_EQ(end, "") << c.in;
  }
}

TEST(QueueKeys, CanonicalizeDeleteRanges) {
  {
    std::string key = "/queue/jobs/", end = "/queue/jobs0";
    canonicalize_delete(&key, &end);
    EXPECT_EQ(key, "/q/jobs/");
    EXPECT_EQ(end, "/q/jobs0");
  }
  {
    std::string key = "/q/jobs/", end = "/q/jobs0";
    canonicalize_delete(&key, &end);
    EXPECT_EQ(key, "/q/jobs/");
    EXPECT_EQ(end, "/q/jobs0");
  }
  {
    // A range whose ends are not both under /queue/ is left alone.
    std::string key = "/queue/a", end = "/r";
    canonicalize_delete(&key, &end);
    EXPECT_EQ(key, "/queue/a");
    EXPECT_EQ(end, "/r");
  }
  {
    std::string key = "a", end = "b";
    canonicalize_delete(&key, &end);
    EXPECT_EQ(key, "a");
    EXPECT_EQ(end, "b");
  }
}

// ---- consumer_watch ---------------------------------------------------------------------

TEST(QueueKeys, ConsumerWatchExact) {
  for (const char* key : {"/q/jobs/c/u1", "/queue/jobs/c/u1", "/q/jobs/consumer/u1", "/queue/jobs/consumer/u1"}) {
    Key k;
    ASSERT_TRUE(consumer_watch(key, "", &k)) << key;
    EXPECT_EQ(k.kind, KeyKind::kConsumer);
    EXPECT_EQ(k.queue, "jobs");
    EXPECT_EQ(k.consumer, "u1");
  }
}

TEST(QueueKeys, ConsumerWatchPrefix) {
  for (const std::string& key : std::vector<std::string>{"/q/jobs/c/u1", "/q/jobs/c/u1/", "/queue/jobs/consumer/u1/"}) {
    Key k;
    std::string end = prefix_end_of(key);
    ASSERT_TRUE(consumer_watch(key, end, &k)) << key;
    EXPECT_EQ(k.kind, KeyKind::kConsumer);
    EXPECT_EQ(k.queue, "jobs");
    EXPECT_EQ(k.consumer, "u1");
  }
}

TEST(QueueKeys, NotConsumerWatches) {
  Key k;
  // A range that is not the key's prefix range.
  EXPECT_FALSE(consumer_watch("/q/jobs/c/u1", "/q/jobs/c/u3", &k));
  EXPECT_FALSE(consumer_watch("/q/jobs/c/u1", std::string_view("\0", 1), &k));
  // A watch on the whole queue, on all consumers, or on a message is an ordinary watch.
  EXPECT_FALSE(consumer_watch("/q/jobs/", prefix_end_of("/q/jobs/"), &k));
  EXPECT_FALSE(consumer_watch("/q/jobs/c/", prefix_end_of("/q/jobs/c/"), &k));
  EXPECT_FALSE(consumer_watch("/q/jobs/c", prefix_end_of("/q/jobs/c"), &k));
  EXPECT_FALSE(consumer_watch("/q/jobs/c/", "", &k));
  std::string message = "/q/jobs/" + std::string(kIdx1) + "/a";
  std::string scoped_ack = "/q/jobs/c/u1/" + std::string(kIdx1) + "/a";
  EXPECT_FALSE(consumer_watch(message, "", &k));
  EXPECT_FALSE(consumer_watch(scoped_ack, "", &k));
  EXPECT_FALSE(consumer_watch(scoped_ack, prefix_end_of(scoped_ack), &k));
  EXPECT_FALSE(consumer_watch("/q/jobs/p/a", "", &k));
  EXPECT_FALSE(consumer_watch("/q/jobs/config", "", &k));
  EXPECT_FALSE(consumer_watch("plain", "", &k));
  EXPECT_FALSE(consumer_watch("/qx/jobs/c/u1", "", &k));
  EXPECT_FALSE(consumer_watch("/q//c/u1", "", &k));
}

// ---- parse_config ---------------------------------------------------------------------------

TEST(QueueConfig, DefaultsAndEmptyObject) {
  Config c;
  EXPECT_EQ(c.visibility_ms, 30000);
  EXPECT_EQ(c.max_deliveries, 5u);
  EXPECT_EQ(c.max_in_flight, 64u);
  c.visibility_ms = 1;
  EXPECT_FALSE(parse_config("{}", &c));
  EXPECT_EQ(c.visibility_ms, 30000);  // absent fields take their defaults
  EXPECT_EQ(c.max_deliveries, 5u);
  EXPECT_EQ(c.max_in_flight, 64u);
}

TEST(QueueConfig, ValidConfigs) {
  Config c;
  Error e = parse_config(R"({"visibility_timeout": 2.5, "max_deliveries": 3, "max_in_flight": 7})", &c);
  ASSERT_FALSE(e) << e.message();
  EXPECT_EQ(c.visibility_ms, 2500);
  EXPECT_EQ(c.max_deliveries, 3u);
  EXPECT_EQ(c.max_in_flight, 7u);

  ASSERT_FALSE(parse_config(R"({"visibility_timeout": 0.5})", &c));
  EXPECT_EQ(c.visibility_ms, 500);
  EXPECT_EQ(c.max_deliveries, 5u);
  EXPECT_EQ(c.max_in_flight, 64u);

  ASSERT_FALSE(parse_config(R"({"visibility_timeout": 86400})", &c));
  EXPECT_EQ(c.visibility_ms, 86400000);
  ASSERT_FALSE(parse_config(R"({"visibility_timeout": 0.0001})", &c));
  EXPECT_EQ(c.visibility_ms, 1);  // never 0
  ASSERT_FALSE(parse_config(R"({"max_deliveries": 1, "max_in_flight": 1000000})", &c));
  EXPECT_EQ(c.max_deliveries, 1u);
  EXPECT_EQ(c.max_in_flight, 1000000u);
  ASSERT_FALSE(parse_config("  {\"max_in_flight\": 1}\n", &c));
  EXPECT_EQ(c.max_in_flight, 1u);
}

TEST(QueueConfig, InvalidConfigsLeaveOutUnchanged) {
  const char* bad[] = {
      "",
      "not json",
      "{",
      "[]",
      "[1]",
      "3",
      "\"s\"",
      "null",
      R"({"visibility_timeout": 0})",
      R"({"visibility_timeout": -1})",
      R"({"visibility_timeout": 86400.5})",
      R"({"visibility_timeout": "30"})",
      R"({"visibility_timeout": null})",
      R"({"max_deliveries": 0})",
      R"({"max_deliveries": -3})",
      R"({"max_deliveries": 2.5})",
      R"({"max_deliveries": "5"})",
      R"({"max_deliveries": 1000001})",
      R"({"max_in_flight": 0})",
      R"({"max_in_flight": 1.5})",
      R"({"max_in_flight": true})",
      R"({"visibility_timeout": 1, "unknown": 1})",
      R"({"VisibilityTimeout": 1})",
  };
  for (const char* json : bad) {
    Config c;
    c.visibility_ms = 1234;
    c.max_deliveries = 9;
    c.max_in_flight = 11;
    Error e = parse_config(json, &c);
    EXPECT_TRUE(e) << json;
    EXPECT_EQ(e.code(), Code::kInvalidArgument) << json;
    EXPECT_EQ(e.message().rfind("etcdq: invalid queue config: ", 0), 0u) << json << " -> " << e.message();
    EXPECT_EQ(c.visibility_ms, 1234) << json;
    EXPECT_EQ(c.max_deliveries, 9u) << json;
    EXPECT_EQ(c.max_in_flight, 11u) << json;
  }
}

TEST(QueueConfig, ErrorsNameTheProblem) {
  Config c;
  EXPECT_NE(parse_config(R"({"bogus": 1})", &c).message().find("bogus"), std::string::npos);
  EXPECT_NE(parse_config(R"({"max_in_flight": 0})", &c).message().find("max_in_flight"), std::string::npos);
  EXPECT_NE(parse_config(R"({"max_deliveries": 0})", &c).message().find("max_deliveries"), std::string::npos);
  EXPECT_NE(parse_config(R"({"visibility_timeout": 0})", &c).message().find("visibility_timeout"),
            std::string::npos);
}

}  // namespace
}  // namespace etcdq::queue

// ---- canonicalize_read --------------------------------------------------------------

namespace etcdq::queue {
namespace {

TEST(QueueKeys, CanonicalizeReadUnderQueueReadsQ) {
  struct Case {
    std::string key, end, want_key, want_end;
  } cases[] = {
      {"/queue/jobs/", "/queue/jobs0", "/q/jobs/", "/q/jobs0"},  // prefix
      {"/queue/jobs/config", "", "/q/jobs/config", ""},          // one key
      {"/q/jobs/", "/q/jobs0", "/q/jobs/", "/q/jobs0"},          // already /q/
      {"/queue/jobs/", std::string(1, '\0'), "/queue/jobs/", std::string(1, '\0')},  // from key: left alone
      {"/queue/jobs/", "/zzz", "/queue/jobs/", "/zzz"},          // range leaving /queue/: left alone
      {"/queuex/a", "", "/queuex/a", ""},                          // not the prefix
      {"plain", "", "plain", ""},
  };
  for (const auto& c : cases) {
    std::string key = c.key, end = c.end;
    canonicalize_read(&key, &end);
    EXPECT_EQ(key, c.want_key) << c.key;
    EXPECT_EQ(end, c.want_end) << c.key;
  }
}

}  // namespace
}  // namespace etcdq::queue
