#!/usr/bin/env bash
# Builds etcdq and runs every test: GoogleTest unit tests, integration tests
# against the real binary with real clients, and the etcd difftest. Extra
# arguments go to ctest.
#
# In CI (CI=true), or with ETCDQ_CHECKS=1, the checks follow (README,
# "Checks"; scripts/checks.sh): the suite under ASan+UBSan, the concurrency
# tests under ThreadSanitizer, then a bounded run of each fuzzer. Any failure
# or sanitizer report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
checks=${ETCDQ_CHECKS:-${CI:-}}
start=$SECONDS
if [ "$checks" = 1 ] || [ "$checks" = true ]; then
  # CI builds from scratch three times (this build, ASan, TSan): as unity
  # builds (scripts/checks.sh says why) with line tables only for debug
  # info (CMakeLists.txt, LINE_TABLES_ONLY) they fit its hour. A
  # developer's build/ stays one file a unit (faster to rebuild after one
  # edit) with full debug info.
  export CMAKE_ARGS="-DCMAKE_UNITY_BUILD=ON -DLINE_TABLES_ONLY=ON ${CMAKE_ARGS:-}"
fi
bash scripts/build.sh
# Python's gRPC in the test processes: no fork handlers (tests/integration/
# harness.py says why).
export GRPC_ENABLE_FORK_SUPPORT=${GRPC_ENABLE_FORK_SUPPORT:-0}
# Three at a time: most tests wait on servers and clients rather than use a
# core (at two, the ASan stage kept 1.2 of the 2 cores busy), and the
# cluster tests and the floods still run alone (RUN_SERIAL). Serially the
# suite took 20 of CI's 60 minutes.
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 900 -j3 "$@")
if [ "$checks" = 1 ] || [ "$checks" = true ]; then
  times="suite $((SECONDS - start)) s"
  # 30 s a fuzz target in CI (60 by default): each run starts again from the
  # seeds, so it is the seeds' regressions and a short search, and the hour
  # is tight (README, "Checks").
  export ETCDQ_FUZZ_SECONDS=${ETCDQ_FUZZ_SECONDS:-30}
  for stage in asan tsan fuzz; do
    # Said before each stage, so that ctest's summary stays the last line.
    echo "checks: so far $times; now the $stage stage" >&2
    t=$SECONDS
    bash scripts/checks.sh "$stage"
    times="$times, $stage $((SECONDS - t)) s"
  done
  echo "checks: all passed; $times" >&2
fi
