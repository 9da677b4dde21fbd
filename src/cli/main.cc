// etcdq: one member. Flags (cli/flags.h) -> the host's config
// (cli/host_config.h) -> the host (host/host.h: TLS, the member, the peer
// and client servers and their listeners) -> a stop signal (SIGTERM or
// SIGINT, or the member's removal from the cluster) -> the host stops: no
// new proposals, in-flight ones finish, everything closes in order.
#include <absl/synchronization/mutex.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "cli/flag_refusal.h"
#include "cli/flags.h"
#include "cli/host_config.h"
#include "cli/logging.h"
#include "cli/snapshot_restore.h"
#include "host/host.h"
#include "queue/ctl.h"

using namespace etcdq;

namespace {

// The reason in the log, and on stderr too when the log goes elsewhere
// (--log-outputs naming only files or stdout): a start that fails says
// why where the operator looks, once (etcd's zap prints its fatal line
// once, to its outputs).
int fail(const cli::Config& cfg, const std::string& msg) {
  spdlog::critical("{}", msg);
  const bool log_on_stderr = std::any_of(cfg.log_outputs.begin(), cfg.log_outputs.end(), [](const std::string& o) {
    return o == "default" || o == "stderr" || o == "journal";
  });
  if (!log_on_stderr) std::fprintf(stderr, "etcdq: %s\n", msg.c_str());
  return 1;
}

// SIGTERM/SIGINT received since the mask was set, without waiting.
bool stop_signal_pending(const sigset_t& sigs) {
  timespec zero{0, 0};
  return sigtimedwait(&sigs, nullptr, &zero) > 0;
}

}  // namespace

int main(int argc, char** argv) {
  // `etcdq snapshot restore FILE ...`: an offline command (cli/snapshot_restore.h).
  if (argc >= 2 && std::string_view(argv[1]) == "snapshot") return cli::snapshot_main(argc - 1, argv + 1);
  // `etcdq queue ls|stat|peek|redrive|purge`: a client of any member (queue/ctl.h).
  if (argc >= 2 && std::string_view(argv[1]) == "queue") return queue::ctl_main(argc - 1, argv + 1);
  // Descriptors: each TLS connection holds three (the socket and a
  // socketpair), a Raft one three too. Raise the soft limit to the hard
  // one, as Go's runtime does for etcd (Go 1.19), so that the servers' own
  // bounds engage before the process runs out.
  if (rlimit nofile{}; getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  // Every thread inherits this mask; only main takes the stop signals.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Debian's abseil checks every gRPC mutex for lock-order cycles, which
  // showed up as ~4% of a put-heavy profile; it is a debugging aid.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  cli::Config cfg;
  bool exit_now = false;
  if (Error e = cli::parse_flags(argc, argv, &cfg, &exit_now)) return cli::refuse_flags(e.message());
  if (cfg.print_version) {
    std::printf("etcdq Version: %s\nAPI Version: 3.6\n", ETCDQ_VERSION);
    return 0;
  }
  if (exit_now) return 0;
  if (Error e = cli::setup_logging(cfg)) return cli::refuse_flags(e.message());
  cfg.feature_gates.register_metrics();
  for (const auto& note : cfg.notes) spdlog::info("{}", note);
  for (const auto& warning : cfg.warnings) spdlog::warn("{}", warning);
  if (std::find(cfg.log_outputs.begin(), cfg.log_outputs.end(), "journal") != cfg.log_outputs.end()) {
    spdlog::warn("--log-outputs=journal: etcdq writes to stderr, which systemd puts in the journal");
  }

  host::Config hc;
  if (Error e = cli::host_config(cfg, &hc)) return fail(cfg, e.message());
  hc.member.stop_requested = [&sigs] { return stop_signal_pending(sigs); };
  static std::atomic<bool> removed{false};
  hc.member.on_removed = [] {
    removed = true;
    kill(getpid(), SIGTERM);  // main's sigwait shuts down in order
  };
  std::unique_ptr<host::Host> h;
  bool stopped = false;
  if (Error e = host::Host::start(std::move(hc), &h, &stopped)) return fail(cfg, e.message());
  if (stopped) return 0;

  int sig = 0;
  sigwait(&sigs, &sig);
  if (removed) {
    spdlog::info("removed from the cluster, shutting down");
  } else {
    spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  h->stop();
  h.reset();
  spdlog::info("stopped");
  return 0;
}
