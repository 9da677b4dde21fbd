// How etcd 3.6 refuses flags before its logger exists (etcdmain/etcd.go),
// for flags refused before logging is set up: an error of Go's flag
// package itself (an unknown flag, a value its type cannot take) as that
// package prints it, exit status 2; any other, a value etcd's checks
// refuse, as etcd's zap line {"level":"warn",...,"msg":"failed to verify
// flags","error":"..."}, exit status 1. Writes to stderr.
#pragma once

#include <string>

namespace etcdq::cli {

// Returns the process exit status.
int refuse_flags(const std::string& error);

// A JSON string's contents, as zap writes them (common/log_line.h's
// append_zap_escaped): for this line, which is written before the logger is.
std::string json_escape(const std::string& s);

}  // namespace etcdq::cli
