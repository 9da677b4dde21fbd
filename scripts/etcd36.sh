#!/usr/bin/env bash
# Builds etcd 3.6 (etcd, etcdctl, etcdutl and etcd's `benchmark` load
# generator) from the module versions pinned in tests/go/go.mod and go.sum,
# and prints the directory that holds them. The binaries are cached under
# ${ETCDQ_CACHE:-$HOME/.cache/etcdq}, keyed by go.sum and the Go version, so
# a second run costs nothing. Go's own module and build caches make a
# rebuild after a version bump cheap too.
#
# The tests, the difftest's oracle and bench/ find the binaries there
# (CMakeLists.txt, ETCD36_DIR). Needs Go >= 1.24 (`tool` lines in go.mod)
# and the Go module proxy.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/tests/go"
command -v go >/dev/null || { echo "etcd36: no Go toolchain on PATH (Go >= 1.24 is needed)" >&2; exit 1; }
key=$(cat "$mod/go.mod" "$mod/go.sum" <(go env GOVERSION) | sha256sum | cut -c1-16)
version=$(awk '$1 == "go.etcd.io/etcd/server/v3" && NF >= 2 {print $2; exit}' "$mod/go.mod")
cache=${ETCDQ_CACHE:-$HOME/.cache/etcdq}
out="$cache/etcd-$version"
if [ -f "$out/.key" ] && [ "$(cat "$out/.key")" = "$key" ] && [ -x "$out/etcd" ]; then
  echo "$out"; exit 0
fi
echo "etcd36: building etcd $version, etcdctl, etcdutl and benchmark into $out" >&2
tmp=$(mktemp -d "$cache.build.XXXX" 2>/dev/null || { mkdir -p "$cache" && mktemp -d "$cache.build.XXXX"; })
trap 'rm -rf "$tmp"' EXIT
# -mod=readonly: go.mod and go.sum are the pin; a build that would change
# them fails instead of quietly taking other versions.
(cd "$mod" && GOFLAGS=-mod=readonly go build -trimpath -o "$tmp/" tool)
mv "$tmp/server" "$tmp/etcd"
echo "$key" > "$tmp/.key"
rm -rf "$out"; mkdir -p "$cache"; mv "$tmp" "$out"; trap - EXIT
"$out/etcd" --version | head -1 >&2
echo "$out"
