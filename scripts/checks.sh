#!/usr/bin/env bash
# The sanitizer and fuzzing checks (README, "Checks"); scripts/test.sh runs
# them after the normal suite in CI. One stage per call:
#
#   bash scripts/checks.sh asan   # clang ASan+UBSan build (build-asan/): the suite but benchmarks, layer probes, difftest, failover cluster tests, Go client tests
#   bash scripts/checks.sh tsan   # ThreadSanitizer build (build-tsan/): unit, watch, queue, cluster tests but the rules ones
#   bash scripts/checks.sh fuzz   # each libFuzzer target for ETCDQ_FUZZ_SECONDS (60) from fuzz/corpus/
#
# Extra arguments go to ctest (e.g. -R watch). A stage fails on a failed test
# and on any sanitizer report, from the test binaries or from any etcdq a
# test started: every report is written under <build>/sanitizer-reports/
# (the harness also fails the test whose member wrote one) and listed here.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:?usage: checks.sh asan|tsan|fuzz [ctest args]}
shift
bash scripts/setup.sh

# The sanitized builds are unity builds (CMake combines a layer's sources,
# eight at a time, into one translation unit): gRPC's and protobuf's headers
# are then parsed and their inline code compiled once a batch instead of
# once a file. Measured on two cores: the ASan build's compile CPU 1,844 ->
# 1,312 s, its wall time 610 -> 441 s. A developer's build/ (scripts/build.sh
# outside CI) stays one file a unit, so that a source that misses an
# include fails there.
configure() {  # dir, cmake args...
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBENCH=OFF -DCMAKE_UNITY_BUILD=ON "$@" ${CMAKE_ARGS:-}
  fi
}

# The ASan+UBSan build (both its stages share it). -O1, as AddressSanitizer's
# documentation advises for its builds: clang++ 14 compiled kv_service.cc
# with ASan+UBSan in 12.3 s at -O1 against 16.0 at -O2, and the tests wait on
# servers and clients more than they compute.
configure_asan() {
  configure build-asan -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DSANITIZE=address,undefined -DFUZZ=ON \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG"
}

# Sanitizer options for every process of the stage. halt_on_error: the first
# report stops the process, so the test that caused it fails; log_path: the
# report also lands in a file that the sweep below finds, whoever started the
# process (ctest, the Python harness, the difftest). Only the stage's own
# variables are set: a runtime also reads UBSAN_OPTIONS, and the common flags
# there (log_path, suppressions) would override its own.
san_env() {  # dir, asan|tsan
  local reports="$PWD/$1/sanitizer-reports"
  rm -rf "$reports"
  mkdir -p "$reports"
  export ETCDQ_SANITIZER_REPORTS="$reports"
  local symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS
  if [ "$2" = asan ]; then
    # LeakSanitizer runs when a server exits on SIGTERM (harness stop());
    # one killed with SIGKILL is not checked.
    # allocator_may_return_null: an impossible size (a hostile peer's length
    # field given to libraft) gets NULL, as glibc's malloc gives it in the
    # real build, where libraft answers RAFT_NOMEM and drops the connection;
    # ASan would otherwise abort on the spot.
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:external_symbolizer_path=$symbolizer:log_path=$reports/asan"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:external_symbolizer_path=$symbolizer:log_path=$reports/asan"
  else
    # ignore_noninstrumented_modules: what an uninstrumented library
    # (Debian's libuv, gRPC, RocksDB, OpenSSL) does through an intercepted
    # call is not recorded as a memory or descriptor access, as TSan does
    # by default on macOS. Without it, the half TSan sees gives false
    # reports: libuv closes descriptors with a raw close syscall
    # (uv__close_nocancel), which TSan never sees, so when the kernel hands
    # the number out again (an accept, an eventfd, an opendir on another
    # thread), TSan pairs it with libuv's last read of the old descriptor.
    # Locks and atomics taken in those libraries still order threads.
    export TSAN_OPTIONS="halt_on_error=1:ignore_noninstrumented_modules=1:second_deadlock_stack=1:allocator_may_return_null=1:external_symbolizer_path=$symbolizer:log_path=$reports/tsan:suppressions=$PWD/scripts/sanitizers/tsan.supp"
  fi
}

# Fails the stage when any process left a sanitizer report.
sweep() {  # dir
  local reports="$PWD/$1/sanitizer-reports"
  # A refused impossible allocation (allocator_may_return_null, above) leaves
  # only a warning that the allocation failed: that is the behaviour under
  # test, not a finding.
  for f in "$reports"/*; do
    [ -f "$f" ] || continue
    if ! grep -v -E -e '^==[0-9]*==WARNING: (AddressSanitizer|ThreadSanitizer) failed to allocate 0x[0-9a-f]* bytes$' -e '^$' "$f" | grep -q .; then
      rm -f "$f"
    fi
  done
  if compgen -G "$reports/*" >/dev/null; then
    echo "checks: sanitizer reports in $reports:" >&2
    for f in "$reports"/*; do
      echo "==== $f" >&2
      head -c 20000 "$f" >&2
    done
    return 1
  fi
}

# In the ASan and TSan stages a failed test runs once more (RETRY): a
# sanitized server is 2-20x slower, so a bound on time that the plain suite
# keeps can be missed once (CI, TSan: a redelivery seen 0.55 s late). What
# those stages are for is not weakened: any sanitizer report fails the stage
# through sweep() whether or not the rerun passed, and the plain suite
# (scripts/test.sh) runs each test once. Not in the fuzz stage, whose
# findings are in the failed run's output: a rerun starts from the seeds.
RETRY=(--repeat until-pass:2)
# Python's gRPC in the test processes: no fork handlers (tests/integration/
# harness.py says why).
export GRPC_ENABLE_FORK_SUPPORT=${GRPC_ENABLE_FORK_SUPPORT:-0}
run_ctest() {  # dir, ctest args...
  local dir=$1
  shift
  local rc=0
  (cd "$dir" && ctest --output-on-failure --timeout 900 "$@") || rc=$?
  sweep "$dir" || rc=1
  return $rc
}

case "$stage" in
  asan)
    # clang, so that the same build also makes the fuzz targets (FUZZ=ON).
    configure_asan
    cmake --build build-asan --target etcdq etcdq_unit_tests etcdq_bbolt_tool etcdq_kv_corrupt_tool
    san_env build-asan asan
    # The layers checks only compile probes: nothing to sanitize. The
    # failover cluster tests (CMakeLists.txt says which) run in the suite
    # and under TSan. The difftest runs etcd beside etcdq for half its time,
    # and etcdctl reaches nothing through it that the integration tests do
    # not. The Go client tests (goclient) run in the suite only: half of
    # them are etcd's, and the integration tests drive the same paths here.
    # etcd36tools (etcdctl 3.6's check perf and friends beside etcd 3.6)
    # likewise, and check perf measures a throughput ASan does not have.
    # Three at a time: at two the stage kept 1.2 of the 2 cores busy
    # (tests wait on servers and clients); cluster tests and the HTTP/2
    # floods still run alone (RUN_SERIAL).
    run_ctest build-asan -LE 'fuzz|layers|failover|difftest|goclient|etcd36tools' -j3 "${RETRY[@]}" "$@"
    ;;
  tsan)
    configure build-tsan -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DSANITIZE=thread
    cmake --build build-tsan --target etcdq etcdq_unit_tests etcdq_kv_corrupt_tool
    san_env build-tsan tsan
    # Cluster tests still run one at a time (RUN_SERIAL); those labelled
    # rules (CMakeLists.txt says which) run in the suite and under ASan.
    # cluster.test_membership is left out: a learner catching up by
    # snapshot (--snapshot-count 50, under writes) installs one every 5-7 s
    # under TSan's slowdown and never catches up within the test's 30 s.
    # cluster.test_catchup likewise: it counts snapshot installs against a
    # leader that snapshots every 100 entries under full-speed writes, a race
    # TSan's slowdown changes; test_snapshot_install drives the same code.
    run_ctest build-tsan -L 'unit|concurrency' -LE rules -E 'cluster.test_membership|cluster.test_catchup' -j3 \
      "${RETRY[@]}" "$@"
    ;;
  fuzz)
    configure_asan
    # Every target fuzz/CMakeLists.txt lists (etcdq_fuzzers).
    cmake --build build-asan --target etcdq_fuzzers
    san_env build-asan asan
    # The fuzzers report on stderr themselves (and leave crash-* inputs in
    # build-asan/fuzz/): no log_path, so their report is in ctest's output.
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
    run_ctest build-asan -L fuzz -j2 "$@"
    ;;
  *)
    echo "checks.sh: unknown stage $stage (asan, tsan or fuzz)" >&2
    exit 2
    ;;
esac
