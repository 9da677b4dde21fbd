"""`etcdctl snapshot save` time and server RSS, etcd 3.4 against etcdq, in one run.

    /usr/bin/python3 bench/snapshot_save.py [--keys 100000] [--value-bytes 256]

For each server: a fresh member (data dir in /var/tmp), N keys of V bytes
loaded with Txns of 100 puts, then `etcdctl snapshot save` timed; the
server's RSS (VmRSS from /proc) is sampled every 10 ms while it runs: the
table shows RSS before the save and the peak during it, plus the file's size.
With --compact the store is compacted at its head first (etcdq then sorts
the revisions kept at the compact revision in memory, mvcc/etcd_keys.h).
The binary under test is $ETCDQ_BIN or build/etcdq.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
os.environ.setdefault("ETCDQ_BIN", os.path.join(REPO, "build", "etcdq"))
import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2  # noqa: E402


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run(binary, name, keys, value_bytes, compact):
    tempfile.tempdir = "/var/tmp"
    m = harness.Member(binary=binary, name=name, extra_args=["--quota-backend-bytes", str(8 << 30)])
    try:
        kv = m.kv()
        value = b"v" * value_bytes
        for start in range(0, keys, 100):
            ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"key/%08d" % i, value=value))
                   for i in range(start, min(keys, start + 100))]
            kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=60)
        if compact:  # then every key's one version is kept at the compact revision
            head = kv.Range(rpc_pb2.RangeRequest(key=b"x")).header.revision
            kv.Compact(rpc_pb2.CompactionRequest(revision=head, physical=True), timeout=600)
        time.sleep(1)
        pid = m.proc.pid
        before = rss_kib(pid)
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_kib(pid))
                time.sleep(0.01)

        t = threading.Thread(target=sample)
        t.start()
        path = os.path.join(m.dir, "snap.db")
        t0 = time.monotonic()
        subprocess.run(["/usr/bin/etcdctl", "--endpoints", m.endpoint, "snapshot", "save", path],
                       env=dict(os.environ, ETCDCTL_API="3"), check=True, capture_output=True, timeout=600)
        secs = time.monotonic() - t0
        done.set()
        t.join()
        return secs, before, peak[0], os.path.getsize(path)
    finally:
        m.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--value-bytes", type=int, default=256)
    ap.add_argument("--compact", action="store_true", help="compact at the head before the save")
    a = ap.parse_args()
    print("| server | keys | save s | RSS before MiB | peak RSS during save MiB | file MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for binary, name in (("/usr/bin/etcd", "etcd"), (os.environ["ETCDQ_BIN"], "etcdq")):
        secs, before, peak, size = run(binary, name, a.keys, a.value_bytes, a.compact)
        print("| %s | %d | %.2f | %.0f | %.0f | %.1f |" % (name, a.keys, secs, before / 1024, peak / 1024, size / 1e6))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
