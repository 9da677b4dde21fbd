// etcd's log line: one JSON object a message, as zap's JSON encoder writes it
// ({"level":..,"ts":..,"msg":..}; go.uber.org/zap/zapcore/json_encoder.go),
// for spdlog. The message is escaped here, once, whatever it holds (a peer's
// or ClickHouse's error text with newlines and quotes): call sites pass raw
// text and must not escape it themselves.
//
// Thread-safety: the formatter is spdlog's; a logger clones it per sink.
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <string_view>

namespace etcdq {

// Appends `text` as the inside of a JSON string, escaped as zap's
// safeAddString does: '"' and '\\' get a backslash; \n, \r, \t their short
// forms; other bytes below 0x20 \u00XX (lowercase hex); each byte that does
// not start a valid UTF-8 sequence (Go's utf8.DecodeRune: no overlong forms,
// surrogates or code points past U+10FFFF) is written as \ufffd; everything
// else (DEL, valid multi-byte UTF-8) as it is.
void append_zap_escaped(std::string_view text, spdlog::memory_buf_t* out);

// The formatter of every etcdq log line: zap's level names ("warn",
// "fatal"), ts in local time with microseconds and zone offset, msg escaped
// by append_zap_escaped; one line, '\n'-terminated.
std::unique_ptr<spdlog::formatter> make_zap_formatter();

}  // namespace etcdq
