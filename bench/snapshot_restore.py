"""Snapshot restore time and peak RSS: `etcdq snapshot restore` against
`etcdctl snapshot restore` (etcd 3.4), of the same etcd snapshot file.

    /usr/bin/python3 bench/snapshot_restore.py [--keys 100000] [--value-bytes 256]

Loads N keys of V bytes into a fresh etcd 3.4 (Txns of 100 puts, data dir in
/var/tmp), overwrites every tenth key once and compacts at the head (so the
file has history and a compaction), takes `etcdctl snapshot save`, then
restores that file with each tool into a fresh data dir in /var/tmp. Time is
wall time; peak RSS is the child's ru_maxrss (os.wait4). Then starts etcdq on
its data dir and checks that `endpoint hashkv` equals the source etcd's.
The binary under test is $ETCDQ_BIN or build/etcdq.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
os.environ.setdefault("ETCDQ_BIN", os.path.join(REPO, "build", "etcdq"))
import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2  # noqa: E402

ETCDCTL = "/usr/bin/etcdctl"
ENV = dict(os.environ, ETCDCTL_API="3")


def timed(cmd):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    secs = time.monotonic() - t0
    out, err = p.stdout.read(), p.stderr.read()
    p.stdout.close()
    p.stderr.close()
    if status != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), err.decode()[-2000:]))
    return secs, ru.ru_maxrss / 1024.0


def hashkv(endpoint):
    out = subprocess.run([ETCDCTL, "--endpoints", endpoint, "--command-timeout", "300s",
                          "endpoint", "hashkv", "-w", "json"],
                         env=ENV, check=True, capture_output=True, text=True).stdout
    h = json.loads(out)[0]["HashKV"]
    return h["hash"], h.get("compact_revision", 0), h["header"]["revision"]


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def print_table(a, head, load_s, snap_mb, e_s, e_rss, e_mb, q_s, q_rss, q_mb):
    print("keys %d x %d B (+%d overwrites, compacted at %d), loaded in %.1f s; snapshot %.1f MB" % (
        a.keys, a.value_bytes, (a.keys + 9) // 10, head - 1, load_s, snap_mb))
    print("| tool | keys | restore s | peak RSS MiB | data dir MB |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print("| etcdctl snapshot restore (etcd 3.4) | %d | %.2f | %.0f | %.1f |" % (a.keys, e_s, e_rss, e_mb))
    print("| etcdq snapshot restore | %d | %.2f | %.0f | %.1f |" % (a.keys, q_s, q_rss, q_mb), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--value-bytes", type=int, default=256)
    a = ap.parse_args()
    tempfile.tempdir = "/var/tmp"
    work = tempfile.mkdtemp(prefix="etcdq-restore-bench-")
    etcd = harness.Member(binary="/usr/bin/etcd", name="etcd",
                          extra_args=["--quota-backend-bytes", str(8 << 30)])
    try:
        kv = etcd.kv()
        value = b"v" * a.value_bytes
        t0 = time.monotonic()
        for start in range(0, a.keys, 100):
            ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"key/%08d" % i, value=value))
                   for i in range(start, min(a.keys, start + 100))]
            kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=60)
        for start in range(0, a.keys, 1000):
            ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"key/%08d" % i, value=b"w" + value))
                   for i in range(start, min(a.keys, start + 1000), 10)]
            kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=60)
        head = kv.Range(rpc_pb2.RangeRequest(key=b"x")).header.revision
        kv.Compact(rpc_pb2.CompactionRequest(revision=head - 1, physical=True), timeout=600)
        load_s = time.monotonic() - t0
        snap = os.path.join(work, "etcd.db")
        subprocess.run([ETCDCTL, "--endpoints", etcd.endpoint, "snapshot", "save", snap],
                       env=ENV, check=True, capture_output=True, timeout=600)
        want = hashkv(etcd.endpoint)
        etcd.stop()
        snap_mb = os.path.getsize(snap) / 1e6

        etcd_dir = os.path.join(work, "etcd-restored")
        e_s, e_rss = timed([ETCDCTL, "snapshot", "restore", snap, "--data-dir", etcd_dir])
        e_mb = du(etcd_dir) / 1e6
        shutil.rmtree(etcd_dir)

        m = harness.Member(start=False, name="restored")
        try:
            q_s, q_rss = timed([os.environ["ETCDQ_BIN"], "snapshot", "restore", snap, "--name", m.name,
                                "--data-dir", m.data_dir, "--initial-cluster", "%s=%s" % (m.name, m.peer_url),
                                "--initial-advertise-peer-urls", m.peer_url])
            q_mb = du(m.data_dir) / 1e6
            print_table(a, head, load_s, snap_mb, e_s, e_rss, e_mb, q_s, q_rss, q_mb)
            t0 = time.monotonic()
            m.start(timeout=300)
            start_s = time.monotonic() - t0
            got = hashkv(m.endpoint)
        finally:
            m.cleanup()
        print("etcdq started on the restored data dir in %.1f s" % start_s)
        print("hashkv after restore: etcd %s, etcdq %s: %s" % (want, got, "same" if want == got else "DIFFERENT"))
        return 0 if want == got else 1
    finally:
        etcd.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
