#include "common/log_line.h"

#include <spdlog/pattern_formatter.h>

#include <array>
#include <cstddef>
#include <ctime>

namespace etcdq {
namespace {

// The length of the valid UTF-8 sequence at p[0..n), 0 if there is none
// (Go's utf8.DecodeRune returning RuneError of size 1). p[0] >= 0x80.
std::size_t zap_utf8_sequence(const unsigned char* p, std::size_t n) {
  auto cont = [&](std::size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && p[i] >= lo && p[i] <= hi;
  };
  unsigned char c = p[0];
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;  // no overlong form
    unsigned char hi = c == 0xED ? 0x9F : 0xBF;  // no surrogate
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    unsigned char lo = c == 0xF0 ? 0x90 : 0x80;  // no overlong form
    unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;  // nothing past U+10FFFF
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// zap's level names (etcd's log lines say "warn" and "fatal"; spdlog's own
// %l says "warning" and "critical"); a member logs critical only as it
// stops for a fault, which is zap's fatal.
class ZapLevelFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string_view name = "info";
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: name = "debug"; break;
      case spdlog::level::warn: name = "warn"; break;
      case spdlog::level::err: name = "error"; break;
      case spdlog::level::critical: name = "fatal"; break;
      default: break;
    }
    dest.append(name.data(), name.data() + name.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<ZapLevelFlag>(); }
};

// The message (spdlog's %v), escaped for the JSON string it sits in.
class ZapMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    append_zap_escaped(std::string_view(msg.payload.data(), msg.payload.size()), &dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<ZapMessageFlag>(); }
};

// The bytes zap writes as they are, whatever comes next: printable ASCII
// but '"' and '\\'.
constexpr auto kZapPlain = [] {
  std::array<bool, 256> plain{};
  for (int c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
  return plain;
}();

}  // namespace

void append_zap_escaped(std::string_view text, spdlog::memory_buf_t* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t done = 0;  // text[0..done) is in out
  std::size_t i = 0;
  auto flush = [&](std::size_t end) { out->append(text.data() + done, text.data() + end); };
  while (i < n) {
    // Most messages are plain ASCII: they leave this loop by its end and are
    // appended in one piece.
    while (i < n && kZapPlain[p[i]]) ++i;
    if (i == n) break;
    unsigned char c = p[i];
    if (c >= 0x80) {
      std::size_t len = zap_utf8_sequence(p + i, n - i);
      if (len != 0) {
        i += len;
        continue;
      }
      flush(i);
      static constexpr std::string_view kReplacement = "\\ufffd";
      out->append(kReplacement.data(), kReplacement.data() + kReplacement.size());
    } else {
      flush(i);
      char esc[6] = {'\\', static_cast<char>(c), 0, 0, 0, 0};
      std::size_t len = 2;
      switch (c) {
        case '"':
        case '\\': break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
          esc[1] = 'u';
          esc[2] = '0';
          esc[3] = '0';
          esc[4] = kHex[c >> 4];
          esc[5] = kHex[c & 0xF];
          len = 6;
      }
      out->append(esc, esc + len);
    }
    done = ++i;
  }
  flush(n);
}

std::unique_ptr<spdlog::formatter> make_zap_formatter() {
  // ts in UTC, microseconds and "Z", whatever the machine's zone, as
  // etcd's logger writes it (client/pkg/logutil/zap.go, DefaultZapLoggerConfig:
  // t.UTC().Format("2006-01-02T15:04:05.000000Z0700")), so a log
  // pipeline that parses etcd's lines parses ours.
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  // %*: ZapLevelFlag, %~: ZapMessageFlag (never spdlog's %v, which is raw).
  formatter->add_flag<ZapLevelFlag>('*').add_flag<ZapMessageFlag>('~').set_pattern(
      R"({"level":"%*","ts":"%Y-%m-%dT%H:%M:%S.%fZ","msg":"%~"})");
  return formatter;
}

}  // namespace etcdq
