#!/usr/bin/env bash
# Builds etcd 3.6 (etcd, etcdctl, etcdutl and etcd's `benchmark` load
# generator) from the module versions pinned in tests/go/go.mod and go.sum,
# and prints the directory that holds them. The binaries are cached under
# ${ETCDQ_CACHE:-$HOME/.cache/etcdq}, in a directory named by the etcd
# version and a hash of go.mod, go.sum and the Go version, so a second run
# costs nothing and two checkouts with different pins never replace each
# other's binaries under a running test. Go's own module and build caches make a
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
out="$cache/etcd-$version-$key"
if [ -x "$out/etcd" ] && [ -x "$out/benchmark" ]; then
  echo "$out"; exit 0
fi
echo "etcd36: building etcd $version, etcdctl, etcdutl and benchmark into $out" >&2
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXX")
trap 'rm -rf "$tmp"' EXIT
# -mod=readonly: go.mod and go.sum are the pin; a build that would change
# them fails instead of quietly taking other versions.
(cd "$mod" && GOFLAGS=-mod=readonly go build -trimpath -o "$tmp/" tool)
mv "$tmp/server" "$tmp/etcd"
# Renamed into place whole: a concurrent run sees all of it or none.
mv -T "$tmp" "$out" 2>/dev/null || rm -rf "$tmp"; trap - EXIT
# sed reads to the end: `head -1` could exit before etcd wrote its other
# lines, and with pipefail that SIGPIPE (141) failed a fresh setup.
"$out/etcd" --version | sed -n 1p >&2
echo "$out"
