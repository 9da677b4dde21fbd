#!/usr/bin/python3
"""CTest smoke run (label `bench`) of bench/queue_cycle.py: a short run of the
whole script, etcd 3.6 ($ETCD36_DIR/etcd) beside etcdq ($ETCDQ_BIN), on 1 and
3 members, with the open loop at 200 messages/s ($ETCDQ_QUEUE_BENCH), without
the RabbitMQ anchor (bench only).

Checks what the script reports, not the servers' speed: it exits 0, both
servers ran synchronous cycles on both cluster sizes, and on 3 members both
open loops delivered every message with no error; and that `--client go`
(the loop through Go's clientv3) runs both servers on 1 member.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ETCDQ = os.environ.get("ETCDQ_BIN") or os.path.join(ROOT, "build", "etcdq")
TOOL = os.environ.get("ETCDQ_QUEUE_BENCH") or os.path.join(ROOT, "build", "bench", "etcdq_queue_bench")
ETCD = os.path.join(os.environ["ETCD36_DIR"], "etcd") if os.environ.get("ETCD36_DIR") else None


class QueueCycleSmoke(unittest.TestCase):
    def test_the_script_runs_both_servers_on_both_sizes(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cycle.json")
            cmd = [sys.executable, os.path.join(HERE, "queue_cycle.py"), "--etcdq", ETCDQ, "--tool", TOOL,
                   "--sizes", "1,3", "--seconds", "0.5", "--rounds", "1", "--rate", "200", "--json", out, "--no-rabbitmq"]
            if ETCD:
                cmd += ["--etcd", ETCD]
            env = dict(os.environ, BENCH_DIR=d)
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
            self.assertEqual(r.returncode, 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr[-4000:]}")
            with open(out) as f:
                res = json.load(f)
        self.assertEqual(res["problems"], [])
        cycle = res["results"]["cycle"]
        self.assertEqual(sorted(cycle), ["1", "3"])
        for size, by in cycle.items():
            for server in ("etcd 3.6", "etcdq"):
                with self.subTest(size=size, server=server):
                    self.assertGreater(by[server]["median"], 0)
        loop = res["results"]["open_loop"]["3"]
        for server in ("etcd 3.6", "etcdq"):
            with self.subTest(open_loop=server):
                self.assertEqual(loop[server]["missing"], 0)
                self.assertEqual(loop[server]["errors"], 0)
                self.assertGreater(loop[server]["p99_ms"], 0)

    @unittest.skipIf(os.environ.get("ETCDQ_SANITIZER_REPORTS"),
                     "the server side is the first test's; under a sanitizer only the time would differ")
    def test_the_go_worker_runs_both_servers(self):
        # --client go: the same loop through Go's clientv3 (built from tests/go's pinned modules).
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cycle.json")
            cmd = [sys.executable, os.path.join(HERE, "queue_cycle.py"), "--etcdq", ETCDQ, "--client", "go",
                   "--sizes", "1", "--seconds", "0.5", "--rounds", "1", "--rate", "0", "--json", out, "--no-rabbitmq"]
            if ETCD:
                cmd += ["--etcd", ETCD]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ, BENCH_DIR=d))
            self.assertEqual(r.returncode, 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr[-4000:]}")
            with open(out) as f:
                res = json.load(f)
        self.assertEqual(res["problems"], [])
        for server in ("etcd 3.6", "etcdq"):
            with self.subTest(server=server):
                self.assertGreater(res["results"]["cycle"]["1"][server]["median"], 0)
                self.assertGreater(res["results"]["cycle"]["1"][server]["p99_ms"], 0)


if __name__ == "__main__":
    unittest.main()
