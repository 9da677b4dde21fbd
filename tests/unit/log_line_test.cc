// common/log_line.h: every log line is one line of valid JSON whatever the
// message holds, escaped as etcd's zap escapes it.
#include "common/log_line.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <cstdlib>
#include <ctime>
#include <memory>
#include <regex>
#include <sstream>
#include <string>

namespace etcdq {
namespace {

// What one message logs at `level` through the zap formatter.
std::string zap_line_of(spdlog::level::level_enum level, const std::string& text) {
  std::ostringstream os;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(os);
  spdlog::logger logger("log_line_test", sink);
  logger.set_formatter(make_zap_formatter());
  logger.set_level(spdlog::level::trace);
  logger.log(level, "{}", text);
  logger.flush();
  return os.str();
}

std::string zap_escaped(std::string_view text) {
  spdlog::memory_buf_t buf;
  append_zap_escaped(text, &buf);
  return std::string(buf.data(), buf.size());
}

TEST(LogLineTest, AnyMessageIsOneLineOfJsonThatGivesTheTextBack) {
  // A ClickHouse refusal as the queue logs it: newline, quotes, backslash,
  // tab, a control byte, DEL, valid UTF-8 and bytes that are not UTF-8.
  const std::string text =
      "queue ch:events: ClickHouse did not take a batch of 2 rows: Code: 27. DB::Exception: "
      "Cannot parse input: expected '\"' before: 'x\\y'\n(at row 1)\r\tbell \x07 del \x7f "
      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 bad \xff trunc \xe2\x82 surrogate \xed\xa0\x80 "
      "overlong \xc0\xaf big \xf4\x90\x80\x80 end";
  std::string line = zap_line_of(spdlog::level::warn, text);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  nlohmann::json entry = nlohmann::json::parse(line);
  EXPECT_EQ(entry["level"], "warn");
  EXPECT_TRUE(entry["ts"].is_string());
  // Each byte that starts no valid UTF-8 sequence becomes U+FFFD (zap's
  // \ufffd), one per byte as Go's utf8.DecodeRune reads them; the rest is
  // the text as given.
  const std::string r = "\xef\xbf\xbd";
  const std::string expected =
      "queue ch:events: ClickHouse did not take a batch of 2 rows: Code: 27. DB::Exception: "
      "Cannot parse input: expected '\"' before: 'x\\y'\n(at row 1)\r\tbell \x07 del \x7f "
      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 bad " + r + " trunc " + r + r + " surrogate " + r + r + r +
      " overlong " + r + r + " big " + r + r + r + r + " end";
  EXPECT_EQ(entry["msg"].get<std::string>(), expected);
}

TEST(LogLineTest, EscapesAsZapDoes) {
  // zapcore's safeAddString: short forms for \n \r \t, \u00xx (lowercase)
  // for other control bytes, \ufffd for a byte that is not UTF-8.
  EXPECT_EQ(zap_escaped("a\"b\\c\nd\re\tf\x01g\x1fh\x7fi"), "a\\\"b\\\\c\\nd\\re\\tf\\u0001g\\u001fh\x7fi");
  EXPECT_EQ(zap_escaped("\x80x\xc3"), "\\ufffdx\\ufffd");
  EXPECT_EQ(zap_escaped("caf\xc3\xa9 \xf4\x8f\xbf\xbf"), "caf\xc3\xa9 \xf4\x8f\xbf\xbf");
  EXPECT_EQ(zap_escaped(std::string_view("nul\0!", 5)), "nul\\u0000!");
  EXPECT_EQ(zap_escaped(""), "");
}

TEST(LogLineTest, PlainMessagesAndLevelsAsEtcdWritesThem) {
  nlohmann::json info = nlohmann::json::parse(zap_line_of(spdlog::level::info, "ready to serve client requests"));
  EXPECT_EQ(info["level"], "info");
  EXPECT_EQ(info["msg"], "ready to serve client requests");
  EXPECT_EQ(nlohmann::json::parse(zap_line_of(spdlog::level::critical, "x"))["level"], "fatal");
  EXPECT_EQ(nlohmann::json::parse(zap_line_of(spdlog::level::debug, "x"))["level"], "debug");
  EXPECT_EQ(nlohmann::json::parse(zap_line_of(spdlog::level::err, "x"))["level"], "error");
}

TEST(LogLineTest, TimestampIsUtcWithMicrosecondsAndZAsEtcdWritesIt) {
  // etcd 3.6: "ts":"2026-12-07T01:35:47.048622Z", in UTC whatever TZ says.
  const char* old_tz = std::getenv("TZ");
  std::string saved = old_tz != nullptr ? old_tz : "";
  setenv("TZ", "America/New_York", 1);
  tzset();
  nlohmann::json info = nlohmann::json::parse(zap_line_of(spdlog::level::info, "x"));
  std::time_t now = std::time(nullptr);
  if (old_tz != nullptr) {
    setenv("TZ", saved.c_str(), 1);
  } else {
    unsetenv("TZ");
  }
  tzset();
  const std::string ts = info["ts"].get<std::string>();
  EXPECT_TRUE(std::regex_match(ts, std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)"))) << ts;
  std::tm utc{};
  gmtime_r(&now, &utc);
  char hour[3];
  std::strftime(hour, sizeof hour, "%H", &utc);
  // The hour is UTC's (unless the hour turned between the two reads).
  EXPECT_TRUE(ts.substr(11, 2) == hour || ts.substr(14, 5) == "59:59" || ts.substr(14, 5) == "00:00") << ts;
}

}  // namespace
}  // namespace etcdq
