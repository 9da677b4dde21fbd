#!/usr/bin/env bash
# Builds etcdq and runs every test: GoogleTest unit tests, integration tests
# against the real binary with real clients, and the etcd difftest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 "$@"
