#!/usr/bin/env bash
# One bounded libFuzzer run: run.sh BINARY SEED_DIR WORK_DIR. Fuzzes for
# $ETCDQ_FUZZ_SECONDS (60) from the seeds (read only) plus what earlier runs
# found in WORK_DIR/corpus; a crash, leak, timeout or sanitizer report fails
# it and leaves the input in WORK_DIR/ (crash-*, leak-*, timeout-*), which
# `BINARY INPUT` replays.
set -euo pipefail
bin=$1 seeds=$2 work=$3
mkdir -p "$work/corpus"
exec "$bin" -max_total_time="${ETCDQ_FUZZ_SECONDS:-60}" -timeout=30 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$seeds"
