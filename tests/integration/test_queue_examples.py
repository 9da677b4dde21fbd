"""The workers of examples/ (README, "Work queues"), run as a user would run them
against the real binary: examples/python/worker.py (python-etcd3) and
examples/go-worker (clientv3, built from its own go.mod). Each handles every
message once and acks it, so the queue ends empty. etcdq-only (etcd has no
queues)."""
import os
import shutil
import subprocess
import tempfile
import unittest

from etcd3.etcdrpc import rpc_pb2

import harness

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY_WORKER = os.path.join(ROOT, "examples", "python", "worker.py")
GO_WORKER_DIR = os.path.join(ROOT, "examples", "go-worker")
GO = shutil.which("go")
N = 20


def handled(stdout):
    """{key: value} of the worker's "handled KEY VALUE" lines; fails on a repeat."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("handled "):
            _, key, value = line.split(" ", 2)
            assert key not in out, "handled twice: " + key
            out[key] = value
    return out


def produce(m, queue, n):
    kv = m.kv()
    for i in range(n):
        kv.Put(rpc_pb2.PutRequest(key=("/q/%s/p/job-%d" % (queue, i)).encode(), value=b"payload-%d" % i),
               timeout=10)


def depth(m, queue):
    return m.kv().Range(rpc_pb2.RangeRequest(key=("/q/%s/0" % queue).encode(), range_end=("/q/%s/:" % queue).encode(),
                                             count_only=True), timeout=10).count


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueExamples(harness.MemberTestCase):
    def check_worker(self, m, queue, cmd):
        produce(m, queue, N)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        got = handled(r.stdout)
        self.assertEqual(sorted(got.values()), sorted("payload-%d" % i for i in range(N)), r.stdout)
        self.assertTrue(all(k.startswith("/q/%s/0" % queue) for k in got), got)
        self.assertEqual(depth(m, queue), 0)  # every message acked

    def test_python_worker(self):
        m = self.new_member()
        self.check_worker(m, "pyjobs", ["/usr/bin/python3", PY_WORKER, "--endpoint", m.endpoint,
                                        "--queue", "pyjobs", "--max", str(N)])

    @unittest.skipIf(GO is None, "needs Go")
    def test_go_worker(self):
        m = self.new_member()
        out = tempfile.mkdtemp(prefix="etcdq-goworker-")
        self.addCleanup(shutil.rmtree, out, True)
        # -mod=readonly: go.mod and go.sum are the pin (tests/go's versions); -trimpath as
        # scripts/etcd36.sh builds, so clientv3 and gRPC come from Go's build cache.
        b = subprocess.run([GO, "build", "-trimpath", "-o", os.path.join(out, "worker"), "."], cwd=GO_WORKER_DIR,
                           env=dict(os.environ, GOFLAGS="-mod=readonly"), capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(b.returncode, 0, b.stderr[-3000:])
        self.check_worker(m, "gojobs", [os.path.join(out, "worker"), "-endpoints", m.endpoint, "-queue", "gojobs",
                                        "-max", str(N)])


if __name__ == "__main__":
    harness.main()
