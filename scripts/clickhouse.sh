#!/usr/bin/env bash
# A ClickHouse for trying etcdq's ch:{table} queues (README, "Work queues"),
# without systemd: Debian's clickhouse-server (scripts/setup.sh installs it)
# run in the background on loopback, with its config, data and logs in DIR.
# Debian's ClickHouse has no client binary: `sql` posts to its HTTP port.
#
#   scripts/clickhouse.sh start DIR [HTTP_PORT [TCP_PORT]]   (default 8123 9000)
#       starts it (again, on the ports it had, if DIR holds one already) and
#       waits until it answers; prints its URL, the --clickhouse-url to give
#   scripts/clickhouse.sh sql DIR 'SQL'      runs one statement, prints the answer
#   scripts/clickhouse.sh url DIR            prints the URL
#   scripts/clickhouse.sh stop DIR           SIGTERM, and SIGKILL after 30 s
#
# The tests start their ClickHouse with it (tests/integration/
# test_queue_clickhouse.py), on free ports.
set -euo pipefail

SERVER=${CLICKHOUSE_SERVER:-/usr/sbin/clickhouse-server}

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
dir=$2
shift 2

port_of() {  # the HTTP port in DIR's config
  sed -n 's:.*<http_port>\([0-9]*\)</http_port>.*:\1:p' "$dir/config.xml"
}

running() {
  [ -f "$dir/clickhouse.pid" ] && kill -0 "$(cat "$dir/clickhouse.pid")" 2>/dev/null
}

case "$cmd" in
start)
  http=${1:-}
  tcp=${2:-}
  if [ ! -x "$SERVER" ]; then
    echo "clickhouse.sh: $SERVER is missing: install Debian's clickhouse-server (bash scripts/setup.sh)" >&2
    exit 1
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if running; then
    echo "clickhouse.sh: already running (pid $(cat "$dir/clickhouse.pid"))" >&2
    echo "http://127.0.0.1:$(port_of)"
    exit 0
  fi
  if [ ! -f "$dir/config.xml" ] || [ -n "$http" ]; then
    http=${http:-8123}
    tcp=${tcp:-9000}
    mkdir -p "$dir/data" "$dir/tmp" "$dir/user_files" "$dir/format_schemas" "$dir/log"
    cat >"$dir/config.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/clickhouse.sh: loopback only, everything in this dir. -->
<yandex>
  <logger><level>warning</level><log>$dir/log/server.log</log><errorlog>$dir/log/error.log</errorlog></logger>
  <http_port>$http</http_port>
  <tcp_port>$tcp</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>$dir/data/</path>
  <tmp_path>$dir/tmp/</tmp_path>
  <user_files_path>$dir/user_files/</user_files_path>
  <format_schema_path>$dir/format_schemas/</format_schema_path>
  <users_config>$dir/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
</yandex>
EOF
    # One user, `default`, no password, from loopback only.
    cat >"$dir/users.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas><default></default></quotas>
</yandex>
EOF
  fi
  port=$(port_of)
  # Another server there (Debian's clickhouse-server service on a systemd
  # host takes 8123) would answer the readiness check below for this one.
  if curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
    echo "clickhouse.sh: something already listens on 127.0.0.1:$port (a ClickHouse service?): use it," \
      "or give other ports: $0 start DIR HTTP_PORT TCP_PORT" >&2
    exit 1
  fi
  : >"$dir/log/stdout.log"
  setsid "$SERVER" --config-file="$dir/config.xml" </dev/null >>"$dir/log/stdout.log" 2>&1 &
  echo $! >"$dir/clickhouse.pid"
  for _ in $(seq 1 300); do
    if [ "$(curl -s --max-time 2 "http://127.0.0.1:$port/ping" 2>/dev/null)" = "Ok." ]; then
      echo "clickhouse.sh: ClickHouse answers on http://127.0.0.1:$port (data and logs in $dir; stop: $0 stop $dir)" >&2
      echo "http://127.0.0.1:$port"
      exit 0
    fi
    if ! running; then
      echo "clickhouse.sh: clickhouse-server exited; its log:" >&2
      tail -n 20 "$dir/log/error.log" "$dir/log/stdout.log" >&2 2>/dev/null || true
      rm -f "$dir/clickhouse.pid"
      exit 1
    fi
    sleep 0.2
  done
  echo "clickhouse.sh: no answer on port $port within 60 s; see $dir/log/" >&2
  exit 1
  ;;
sql)
  [ $# -eq 1 ] || usage
  # ClickHouse's error text on stderr and a non-zero exit on an error.
  out=$(curl -sS --max-time 60 -w '\n%{http_code}' "http://127.0.0.1:$(port_of)/" --data-binary "$1")
  code=${out##*$'\n'}
  body=${out%$'\n'*}
  if [ "$code" != 200 ]; then
    printf '%s\n' "$body" >&2
    exit 1
  fi
  [ -z "$body" ] || printf '%s\n' "$body"
  ;;
url)
  echo "http://127.0.0.1:$(port_of)"
  ;;
stop)
  if running; then
    pid=$(cat "$dir/clickhouse.pid")
    kill -TERM "$pid"
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/clickhouse.pid"
  ;;
*)
  usage
  ;;
esac
