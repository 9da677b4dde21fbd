#!/usr/bin/env bash
# Profiles a fresh 1-member etcdq under one etcdq_loadgen (etcdq_watch_bench,
# etcdq_queue_bench) run: perf record -g on the server for the whole run, then the hottest
# symbols (self time) and the hottest threads. Loopback, free ports, a temp
# data dir in $BENCH_DIR or /var/tmp; everything it starts is stopped.
#
#   bench/profile.sh [--watch] -- <load generator arguments>
#   bench/profile.sh -- --workload put --conns 100 --clients 1000 --seconds 10
#   bench/profile.sh --watch -- --rate 0 --concurrency 64 --seconds 10
#   bench/profile.sh --queue -- --messages 100000 --consumers 4
#
# Output: perf.data and report.txt under the printed directory (kept).
set -euo pipefail
cd "$(dirname "$0")/.."
tool=build/bench/etcdq_loadgen
if [ "${1:-}" = "--watch" ]; then tool=build/bench/etcdq_watch_bench; shift; fi
if [ "${1:-}" = "--queue" ]; then tool=build/bench/etcdq_queue_bench; shift; fi
[ "${1:-}" = "--" ] && shift
out=$(mktemp -d "${BENCH_DIR:-/var/tmp}/etcdq-profile-XXXXXX")
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
c=$(port); p=$(port)
cp build/etcdq "$out/etcdq"
"$out/etcdq" --name default --data-dir "$out/data" \
  --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
  --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
  --initial-cluster "default=http://127.0.0.1:$p" >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$out/data"' EXIT
for _ in $(seq 100); do
  etcdctl --endpoints "127.0.0.1:$c" put profile-probe x >/dev/null 2>&1 && break
  sleep 0.1
done
perf record -F 499 -g -o "$out/perf.data" -p "$server" >/dev/null 2>&1 &
perf_pid=$!
sleep 0.5
"$tool" --endpoints "127.0.0.1:$c" "$@" | tee "$out/loadgen.txt"
kill -INT $perf_pid
wait $perf_pid || true
{
  echo "== threads (samples)"
  perf report -i "$out/perf.data" --no-children --sort comm --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -15
  echo "== hottest symbols, self time"
  perf report -i "$out/perf.data" --no-children --sort comm,dso,sym --stdio -g none --percent-limit 0.7 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -60
} | tee "$out/report.txt"
echo "profile in $out"
