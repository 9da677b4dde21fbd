// etcd's --logger/--log-outputs/--log-level (embed/config_logging.go): one
// spdlog logger, the process default, writing etcd's zap JSON lines
// ({"level":..,"ts":..,"msg":..}, zap's level names) to every output:
// "default", "stderr" and "journal" (systemd reads stderr) go to stderr,
// "stdout" to stdout, anything else is a file appended to.
//
// Errors: a file output whose directory does not exist or that cannot be
// opened, in etcd's (zap's) words: open sink "<path>": ...
// Thread-safety: call once from main, before other threads log.
#pragma once

#include "cli/flags.h"
#include "common/error.h"

namespace etcdq::cli {

Error setup_logging(const Config& cfg);

}  // namespace etcdq::cli
