#!/usr/bin/env bash
# Installs every Debian package that building, testing and benchmarking etcdq
# needs. Idempotent: packages already present are not touched, and apt is only
# asked when something is missing. Run as root (CI and the dev machines are).
set -euo pipefail

PACKAGES=(
  # build
  g++ cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libraft-dev libuv1-dev liblz4-dev
  # libraft's checksum, computed by ISA-L (src/consensus/libraft_crc.cc)
  libisal-dev
  # zlib's crc32 over the streamed snapshot state (src/common/state_pairs.h);
  # gRPC's and RocksDB's packages pull it in too
  zlib1g-dev
  libspdlog-dev libfmt-dev libcli11-dev libcpp-httplib-dev nlohmann-json3-dev libyaml-cpp-dev
  libssl-dev libcrypt-dev libjwt-dev libgtest-dev libgmock-dev libbenchmark-dev
  prometheus-cpp-dev
  # the member's malloc: gperftools' tcmalloc (CMakeLists.txt, "malloc")
  libgoogle-perftools-dev
  # tests: the oracle and the real clients
  etcd-server etcd-client python3 python3-etcd3 python3-grpcio python3-etcd3gw wrk
  # the TLS tests make their certificates and talk HTTPS (test_client_tls.py)
  openssl curl
  # promtool, which checks /metrics (test_metrics.py) and runs etcd's alert
  # rules on etcdq's series; jsonnet renders those rules from etcd's mixin
  # (scripts/etcd_mixin.sh, test_metrics_etcd36.py)
  prometheus jsonnet
  # the queue sink's test starts a ClickHouse of its own on loopback
  clickhouse-server
  # the queues' page is tested in a real browser, headless (test_queue_page.py)
  chromium
  # the checks (scripts/checks.sh): clang's sanitizers and libFuzzer, and
  # llvm-symbolizer for readable reports
  clang-14 libclang-rt-14-dev llvm-14
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts an etcd service when etcd-server is installed on a machine with
# systemd; it would hold 2379. Tests never use 2379, but the quick start does.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  systemctl stop etcd || true
fi
# etcd 3.6 (the oracle, etcdctl/etcdutl 3.6 and etcd's benchmark), built from
# the pinned Go modules in tests/go and cached (scripts/etcd36.sh).
bash "$(dirname "$0")/etcd36.sh" >/dev/null
# etcd's alert rules (its mixin), rendered from the pinned module and cached
# (scripts/etcd_mixin.sh).
bash "$(dirname "$0")/etcd_mixin.sh" >/dev/null
