#!/usr/bin/env bash
# Quick start: builds etcdq and runs one member on 127.0.0.1:2379 with its data
# in ./default.etcdq (the directory you run this from). Extra arguments are
# passed to etcdq (etcd's flag names, e.g. --name, --data-dir).
set -euo pipefail
here=$(pwd)
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh"
cd "$here"
exec "$root/${BUILD_DIR:-build}/etcdq" "$@"
