// The etcd 3.6 flags that etcdq accepts but does not act on, each with the
// reason, so that a command line written for etcd 3.6 (kubeadm's static
// pod, a unit file) starts etcdq unchanged. The list is etcd 3.6.17's
// flag set (embed.Config.AddFlags and etcdmain/config.go, which also
// accepts a few long-gone flags and ignores them), minus the flags
// cli/flags.cc defines because etcdq serves them.
//
// A value is checked as Go's flag package would check it for the flag's
// type (`invalid value "x" for flag -max-wals: parse error`), so a command
// line etcd refuses is refused here too. Each flag also comes from its
// ETCD_* variable (not with --config-file, as the other flags).
//
// At start, main logs one line naming every one of them that was given and
// why it changes nothing (ignored_flags_log_line).
//
// Not here: --experimental-initial-corrupt-check and
// --(experimental-)corrupt-check-time, which the corruption check serves
// (cli/flags.cc, member/corruption_check.h).
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace etcdq::cli {

// The Go type of a flag's value, as etcd defines the flag.
enum class GoKind {
  kBool,      // --f or --f=true|false (strconv.ParseBool)
  kString,    // any text
  kInt,       // a signed integer
  kUint,      // an unsigned integer
  kDuration,  // Go's time.ParseDuration: "300ms", "1h30m", "0"
  kIgnored,   // etcd's flags.IgnoredFlag: any value or none, a warning
};

struct IgnoredFlag {
  const char* name;  // without the dashes
  GoKind kind;
  const char* reason;  // why it changes nothing in etcdq (for the log)
};

const std::vector<IgnoredFlag>& ignored_flags();

// Values given, by flag name (only those given: command line or ETCD_*).
using IgnoredValues = std::map<std::string, std::string>;

// Defines every ignored flag on `app`; their values land in *values after
// app.parse() (read them with collect_ignored_flags).
void define_ignored_flags(CLI::App& app, bool with_env, std::map<std::string, std::string>* storage);

// After app.parse(): the ignored flags that were given, checked as Go's
// flag package checks their type. Errors: InvalidArgument in Go's words.
Error collect_ignored_flags(const CLI::App& app, const std::map<std::string, std::string>& storage,
                            IgnoredValues* given);

// One line for the log: each given flag, its value, and why it changes
// nothing, as given (the log line escapes it: common/log_line.h). "" if
// none was given.
std::string ignored_flags_log_line(const IgnoredValues& given);

// Go's time.ParseDuration accepts it (etcd's duration flags).
bool is_go_duration(const std::string& s);

}  // namespace etcdq::cli
