#!/usr/bin/env bash
# Builds a current Kubernetes kube-apiserver and kubectl from the Go module
# proxy, at the version pinned in go.mod/go.sum beside this script, and
# prints the directory that holds them. Cached under
# ${ETCDQ_CACHE:-$HOME/.cache/etcdq}/kubernetes-<version>, keyed by go.mod,
# go.sum and the Go version: a second run costs nothing.
#
# Needs Go >= the `go` line of go.mod (Kubernetes 1.37 wants 1.26) and the
# module proxy. Slow: see tools/kube-apiserver/README.md for the time it takes.
# KUBE_BUILD_P (default 2) is `go build -p`; the build runs under nice.
#
# To move to a newer Kubernetes: change the version in `require` and every
# `replace` line (the staging modules k8s.io/* are v0.<minor>.<patch> of
# Kubernetes v1.<minor>.<patch>), then `go mod tidy`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { echo "kube-apiserver: no Go toolchain on PATH" >&2; exit 1; }
key=$(cat "$here/go.mod" "$here/go.sum" <(go env GOVERSION) | sha256sum | cut -c1-16)
version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
cache=${ETCDQ_CACHE:-$HOME/.cache/etcdq}
out="$cache/kubernetes-$version"
if [ -f "$out/.key" ] && [ "$(cat "$out/.key")" = "$key" ] && [ -x "$out/kube-apiserver" ] && [ -x "$out/kubectl" ]; then
  echo "$out"; exit 0
fi
echo "kube-apiserver: building Kubernetes $version kube-apiserver and kubectl into $out" >&2
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/kubernetes.build.XXXX")
trap 'rm -rf "$tmp"' EXIT
# The version Kubernetes' own build stamps in (hack/lib/version.sh); without
# it the binaries say v0.0.0-master.
minor=${version#v1.}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  ld="$ld -X $p.buildDate=1970-01-01T00:00:00Z"
done
start=$(date +%s)
# -mod=readonly: go.mod and go.sum are the pin. CGO off as Kubernetes' release builds.
(cd "$here" && CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n 10 \
  go build -p "${KUBE_BUILD_P:-2}" -trimpath -ldflags "$ld" -o "$tmp/" tool)
chmod 755 "$tmp"; echo "$key" > "$tmp/.key"
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
echo "kube-apiserver: built in $(( $(date +%s) - start )) s" >&2
"$out/kube-apiserver" --version >&2
echo "$out"
