// The command line's config (cli/flags.h) as the host's (host/config.h):
// the member's options, the listen URLs and their TLS. What depends on the
// process (stop signals, removal) is left to main; what etcd checks at
// start (bootstrap checks, TLS files, JWT keys) to the host (host/host.h).
// Errors: InvalidArgument for an --initial-cluster that does not parse
// (parse_flags has checked it already).
#pragma once

#include "cli/flags.h"
#include "common/error.h"
#include "host/config.h"

namespace etcdq::cli {

Error host_config(const Config& cfg, host::Config* out);

}  // namespace etcdq::cli
