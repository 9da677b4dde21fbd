#!/usr/bin/env bash
# Renders etcd's own Prometheus alert rules (the etcd mixin's
# `prometheusAlerts`, contrib/mixin in etcd's repository) from the module
# zip of go.etcd.io/etcd/v3 at the version pinned in tests/go/go.mod and
# go.sum (go mod download verifies it against go.sum), and prints the path
# of the rendered rule file. The mixin is not kept in this repository.
# Cached under ${ETCDQ_CACHE:-$HOME/.cache/etcdq}/etcd-mixin-<version>/, so
# a second run costs nothing. Needs Go (the module proxy) and jsonnet
# (Debian's package, scripts/setup.sh). tests/cluster/test_metrics_etcd36.py
# evaluates these rules with promtool on etcdq's series.
#
# Only config.libsonnet and alerts/ are imported: the mixin's dashboards
# need grafonnet, which the module zip does not carry. Jsonnet's JSON output
# is YAML too, so promtool reads it as it is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/tests/go"
command -v go >/dev/null || { echo "etcd_mixin: no Go toolchain on PATH" >&2; exit 1; }
command -v jsonnet >/dev/null || { echo "etcd_mixin: no jsonnet on PATH (scripts/setup.sh installs it)" >&2; exit 1; }
version=$(awk '$1 == "go.etcd.io/etcd/v3" && NF >= 2 {print $2; exit}' "$mod/go.mod")
[ -n "$version" ] || { echo "etcd_mixin: tests/go/go.mod pins no go.etcd.io/etcd/v3" >&2; exit 1; }
cache=${ETCDQ_CACHE:-$HOME/.cache/etcdq}
out="$cache/etcd-mixin-$version"
if [ -s "$out/etcd-alerts.json" ]; then
  echo "$out/etcd-alerts.json"; exit 0
fi
dir=$(cd "$mod" && GOFLAGS=-mod=readonly go mod download -json "go.etcd.io/etcd/v3@$version" |
      sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
mixin="$dir/contrib/mixin"
[ -f "$mixin/alerts/alerts.libsonnet" ] || { echo "etcd_mixin: $mixin has no alerts/alerts.libsonnet" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.mixin.XXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$mixin" && jsonnet -e '((import "config.libsonnet") + (import "alerts/alerts.libsonnet")).prometheusAlerts') \
  > "$tmp/etcd-alerts.json"
# The mixin's own rule tests, kept beside the rules for reference.
cp "$mixin/test.yaml" "$tmp/etcd-mixin-test.yaml"
mv -T "$tmp" "$out" 2>/dev/null || rm -rf "$tmp"; trap - EXIT
echo "$out/etcd-alerts.json"
