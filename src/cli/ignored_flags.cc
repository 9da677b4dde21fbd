#include "cli/ignored_flags.h"

#include <cctype>
#include <regex>

namespace etcdq::cli {
namespace {

constexpr const char* kNoBbolt = "no bbolt: the state is in RocksDB";
constexpr const char* kNoDiscovery = "discovery setting; etcdq has no discovery, members come from --initial-cluster";
constexpr const char* kNoTracing = "no OpenTelemetry tracing in etcdq";
constexpr const char* kGone = "flag is no longer supported (etcd 3.6 ignores it too)";

bool is_go_bool(const std::string& s) {
  for (const char* v : {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}) {
    if (s == v) return true;
  }
  return false;
}

// strconv.ParseInt / ParseUint with base 0, as Go's flag package parses
// int and uint flags ("0x10", "0o17", "0b101", "1_000" are numbers too).
bool is_go_integer(const std::string& s, bool is_signed) {
  static const std::regex kUnsigned("(0[xX](_?[0-9a-fA-F])+|0[bB](_?[01])+|0[oO]?(_?[0-7])+|[1-9](_?[0-9])*|0)");
  std::string digits = s;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
    if (!is_signed) return false;
    digits = digits.substr(1);
  }
  return std::regex_match(digits, kUnsigned);
}

}  // namespace

bool is_go_duration(const std::string& s) {
  // time.ParseDuration: an optional sign, then "0" or number-unit pairs.
  static const std::regex kDuration(R"([-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+))");
  return std::regex_match(s, kDuration);
}

const std::vector<IgnoredFlag>& ignored_flags() {
  using K = GoKind;
  static const std::vector<IgnoredFlag> flags = {
      // Member.
      {"initial-election-tick-advance", K::kBool, "libraft times elections itself (a lone voter elects itself at once)"},
      {"max-snapshots", K::kUint, "libraft keeps its own snapshots (metadata only; installers stream the live state)"},
      {"max-wals", K::kUint, "libraft removes the log segments a snapshot covers (--snapshot-count)"},
      {"memory-mlock", K::kBool, kNoBbolt},
      {"experimental-memory-mlock", K::kBool, kNoBbolt},
      {"backend-bbolt-freelist-type", K::kString, kNoBbolt},
      {"backend-batch-interval", K::kDuration, "RocksDB gets one write batch per applied Raft entry"},
      {"backend-batch-limit", K::kInt, "RocksDB gets one write batch per applied Raft entry"},
      {"max-concurrent-streams", K::kUint, "etcdq's HTTP/2 stream limits are its own (src/net/h2_guard.h)"},
      {"grpc-keepalive-min-time", K::kDuration, "gRPC C++'s keepalive defaults apply"},
      {"grpc-keepalive-interval", K::kDuration, "gRPC C++'s keepalive defaults apply"},
      {"grpc-keepalive-timeout", K::kDuration, "gRPC C++'s keepalive defaults apply"},
      {"socket-reuse-port", K::kBool, "etcdq sets its listeners' socket options itself"},
      {"socket-reuse-address", K::kBool, "etcdq sets its listeners' socket options itself"},
      {"raft-read-timeout", K::kDuration, "libraft's connections have no read timeout; heartbeats find dead peers"},
      {"raft-write-timeout", K::kDuration, "libraft's connections have no write timeout; heartbeats find dead peers"},
      {"unsafe-no-fsync", K::kBool, "etcdq always fsyncs the Raft log"},
      // Clustering. A discovery URL, DNS domain or endpoint list that is
      // not empty is refused in flags.cc: ignoring it would bootstrap
      // another cluster than the one asked for.
      {"discovery", K::kString, kNoDiscovery},
      {"discovery-token", K::kString, kNoDiscovery},
      {"discovery-endpoints", K::kString, kNoDiscovery},
      {"discovery-dial-timeout", K::kDuration, kNoDiscovery},
      {"discovery-request-timeout", K::kDuration, kNoDiscovery},
      {"discovery-keepalive-time", K::kDuration, kNoDiscovery},
      {"discovery-keepalive-timeout", K::kDuration, kNoDiscovery},
      {"discovery-insecure-transport", K::kBool, kNoDiscovery},
      {"discovery-insecure-skip-tls-verify", K::kBool, kNoDiscovery},
      {"discovery-cert", K::kString, kNoDiscovery},
      {"discovery-key", K::kString, kNoDiscovery},
      {"discovery-cacert", K::kString, kNoDiscovery},
      {"discovery-user", K::kString, kNoDiscovery},
      {"discovery-password", K::kString, kNoDiscovery},
      {"discovery-fallback", K::kString, kNoDiscovery},
      {"discovery-proxy", K::kString, kNoDiscovery},
      {"discovery-srv", K::kString, kNoDiscovery},
      {"discovery-srv-name", K::kString, kNoDiscovery},
      {"v2-deprecation", K::kString, "etcdq has no v2 store"},
      // Security.
      {"client-cert-file", K::kString, "etcdq's JSON gateway calls the server in process, with no client certificate"},
      {"client-key-file", K::kString, "etcdq's JSON gateway calls the server in process, with no client certificate"},
      {"peer-client-cert-file", K::kString, "etcdq dials peers with --peer-cert-file and --peer-key-file"},
      {"peer-client-key-file", K::kString, "etcdq dials peers with --peer-cert-file and --peer-key-file"},
      {"peer-skip-client-san-verification", K::kBool,
       "etcdq does not check a peer's client certificate SAN against its address (only --peer-cert-allowed-*)"},
      {"experimental-peer-skip-client-san-verification", K::kBool,
       "etcdq does not check a peer's client certificate SAN against its address (only --peer-cert-allowed-*)"},
      {"self-signed-cert-validity", K::kUint, "--auto-tls and --peer-auto-tls certificates are valid for one year"},
      {"cors", K::kString, "the JSON gateway answers every origin (Access-Control-Allow-Origin: *)"},
      {"host-whitelist", K::kString, "etcdq's HTTP does not check the Host header"},
      // Profiling, monitoring, logging.
      {"enable-pprof", K::kBool,
       "there is no /debug/pprof endpoint: etcdq is not a Go program (profile it with perf record -p PID)"},
      {"metrics", K::kString, "etcdq exports one set of metrics (not extensive's grpc_server_handling_seconds)"},
      {"log-format", K::kString, "etcdq writes etcd's JSON lines only"},
      {"enable-log-rotation", K::kBool, "etcdq does not rotate its log files (logrotate with copytruncate does)"},
      {"log-rotation-config-json", K::kString, "etcdq does not rotate its log files (logrotate with copytruncate does)"},
      {"warning-unary-request-duration", K::kDuration, "etcdq logs no slow-request warnings"},
      {"experimental-warning-unary-request-duration", K::kDuration, "etcdq logs no slow-request warnings"},
      {"warning-apply-duration", K::kDuration, "etcdq logs no slow-apply warnings"},
      {"experimental-warning-apply-duration", K::kDuration, "etcdq logs no slow-apply warnings"},
      {"enable-distributed-tracing", K::kBool, kNoTracing},
      {"experimental-enable-distributed-tracing", K::kBool, kNoTracing},
      {"distributed-tracing-address", K::kString, kNoTracing},
      {"experimental-distributed-tracing-address", K::kString, kNoTracing},
      {"distributed-tracing-service-name", K::kString, kNoTracing},
      {"experimental-distributed-tracing-service-name", K::kString, kNoTracing},
      {"distributed-tracing-instance-id", K::kString, kNoTracing},
      {"experimental-distributed-tracing-instance-id", K::kString, kNoTracing},
      {"distributed-tracing-sampling-rate", K::kInt, kNoTracing},
      {"experimental-distributed-tracing-sampling-rate", K::kInt, kNoTracing},
      {"enable-grpc-gateway", K::kBool, "etcdq always serves the JSON gateway on its HTTP URLs"},
      // Experimental features. The four boolean ones that 3.6 maps to
      // feature gates also set their gate (cli/feature_gates.h).
      {"experimental-enable-lease-checkpoint", K::kBool, "feature gate LeaseCheckpoint (see --feature-gates)"},
      {"experimental-enable-lease-checkpoint-persist", K::kBool,
       "feature gate LeaseCheckpointPersist (see --feature-gates)"},
      {"experimental-txn-mode-write-with-shared-buffer", K::kBool,
       "feature gate TxnModeWriteWithSharedBuffer (see --feature-gates)"},
      {"experimental-stop-grpc-service-on-defrag", K::kBool, "feature gate StopGRPCServiceOnDefrag (see --feature-gates)"},
      {"experimental-compaction-batch-limit", K::kInt, "etcdq compacts in the background without blocking writes"},
      {"compaction-batch-limit", K::kInt, "etcdq compacts in the background without blocking writes"},
      {"experimental-compaction-sleep-interval", K::kDuration, "etcdq compacts in the background without blocking writes"},
      {"compaction-sleep-interval", K::kDuration, "etcdq compacts in the background without blocking writes"},
      {"experimental-bootstrap-defrag-threshold-megabytes", K::kUint, "no bbolt to defragment at start"},
      {"bootstrap-defrag-threshold-megabytes", K::kUint, "no bbolt to defragment at start"},
      {"experimental-downgrade-check-time", K::kDuration, "etcdq has no cluster downgrade"},
      {"downgrade-check-time", K::kDuration, "etcdq has no cluster downgrade"},
      // The corruption check's --experimental-initial-corrupt-check and
      // --(experimental-)corrupt-check-time are served (cli/flags.cc); its
      // compaction-hash check is not built.
      {"experimental-compact-hash-check-enabled", K::kBool,
       "not built: etcdq has no compaction hash check yet (--corrupt-check-time compares whole histories)"},
      {"experimental-compact-hash-check-time", K::kDuration,
       "not built: etcdq has no compaction hash check yet (--corrupt-check-time compares whole histories)"},
      {"compact-hash-check-time", K::kDuration,
       "not built: etcdq has no compaction hash check yet (--corrupt-check-time compares whole histories)"},
      //
      // etcdmain's ignored flags (flags.IgnoredFlag), long gone from etcd.
      {"cluster-active-size", K::kIgnored, kGone},
      {"cluster-remove-delay", K::kIgnored, kGone},
      {"cluster-sync-interval", K::kIgnored, kGone},
      {"config", K::kIgnored, kGone},
      {"force", K::kIgnored, kGone},
      {"max-result-buffer", K::kIgnored, kGone},
      {"max-retry-attempts", K::kIgnored, kGone},
      {"peer-heartbeat-interval", K::kIgnored, kGone},
      {"peer-election-timeout", K::kIgnored, kGone},
      {"retry-interval", K::kIgnored, kGone},
      {"snapshot", K::kIgnored, kGone},
      {"v", K::kIgnored, kGone},
      {"vv", K::kIgnored, kGone},
      {"test.coverprofile", K::kIgnored, kGone},
      {"test.outputdir", K::kIgnored, kGone},
  };
  return flags;
}

void define_ignored_flags(CLI::App& app, bool with_env, std::map<std::string, std::string>* storage) {
  auto* group = app.add_option_group("etcd 3.6 flags etcdq ignores",
                                     "Accepted so that etcd's command lines start etcdq; each logs why it changes nothing");
  for (const auto& f : ignored_flags()) {
    std::string& value = (*storage)[f.name];
    std::string name = std::string("--") + f.name;
    CLI::Option* o = (f.kind == GoKind::kBool || f.kind == GoKind::kIgnored)
                         ? group->add_flag(name, value, f.reason)
                         : group->add_option(name, value, f.reason);
    if (with_env && f.kind != GoKind::kIgnored) {
      std::string env = std::string("ETCD_") + f.name;
      for (auto& ch : env) ch = ch == '-' || ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      o->envname(env);
    }
  }
}

Error collect_ignored_flags(const CLI::App& app, const std::map<std::string, std::string>& storage,
                            IgnoredValues* given) {
  for (const auto& f : ignored_flags()) {
    const CLI::Option* o = app.get_option_no_throw(std::string("--") + f.name);
    if (o == nullptr || o->count() == 0) continue;
    const std::string& v = storage.at(f.name);
    bool ok = true;
    switch (f.kind) {
      case GoKind::kBool: ok = is_go_bool(v); break;
      case GoKind::kInt: ok = is_go_integer(v, true); break;
      case GoKind::kUint: ok = is_go_integer(v, false); break;
      case GoKind::kDuration: ok = is_go_duration(v); break;
      case GoKind::kString:
      case GoKind::kIgnored: break;
    }
    // Go's flag package, word for word (flag.FlagSet.parseOne), which words
    // a bad boolean its own way.
    if (!ok && f.kind == GoKind::kBool) {
      return {Code::kInvalidArgument, "invalid boolean value \"" + v + "\" for -" + f.name + ": parse error"};
    }
    if (!ok) return {Code::kInvalidArgument, "invalid value \"" + v + "\" for flag -" + f.name + ": parse error"};
    (*given)[f.name] = v;
  }
  return {};
}

std::string ignored_flags_log_line(const IgnoredValues& given) {
  std::string line;
  for (const auto& f : ignored_flags()) {
    auto it = given.find(f.name);
    if (it == given.end()) continue;
    line += line.empty() ? "" : "; ";
    line += std::string("--") + f.name + "=" + it->second + " (" + f.reason + ")";
  }
  return line;
}

}  // namespace etcdq::cli
