#!/usr/bin/python3
"""CTest smoke run (label `bench`): the load generators against a fresh etcdq.

Starts $ETCDQ_BIN (tests/integration/harness.py's Member: free loopback ports,
temp data dir), runs $ETCDQ_LOADGEN for about 1.5 s per workload (every
workload, small client counts) and $ETCDQ_WATCH_BENCH for 2 s, and checks that
both exit 0 and that their JSON says what ran: every workload answered
requests with no errors and no violations, the txn-puts all succeeded, the
k8s watchers saw every write. It checks the tools, not the server's speed.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

import harness  # noqa: E402

BUILD = os.path.join(os.path.dirname(HERE), "build", "bench")
LOADGEN = os.environ.get("ETCDQ_LOADGEN") or os.path.join(BUILD, "etcdq_loadgen")
WATCH_BENCH = os.environ.get("ETCDQ_WATCH_BENCH") or os.path.join(BUILD, "etcdq_watch_bench")
WORKLOADS = ["put", "range", "txn-put", "delete", "lease-keepalive", "k8s"]


class LoadgenSmoke(harness.MemberTestCase):
    def run_tool(self, args, timeout=120):
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        self.assertEqual(r.returncode, 0, "%s exited %d\nstdout:\n%s\nstderr:\n%s" % (
            os.path.basename(args[0]), r.returncode, r.stdout, r.stderr[-4000:]))
        return r.stdout

    def test_every_workload_answers_without_errors(self):
        m = self.new_member()
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "loadgen.json")
            self.run_tool([LOADGEN, "--endpoints", m.endpoint, "--workload", ",".join(WORKLOADS),
                           "--conns", "4", "--clients", "16", "--seconds", "1.5", "--preload", "200",
                           "--leases", "8", "--k8s-watchers", "2", "--no-progress", "--json", out])
            with open(out) as f:
                res = json.load(f)
        self.assertTrue(res["ok"])
        by_name = {w["workload"]: w for w in res["workloads"]}
        self.assertEqual(sorted(by_name), sorted(WORKLOADS))
        for name, w in by_name.items():
            with self.subTest(workload=name):
                self.assertTrue(w["ok"], w)
                self.assertGreater(w["requests"], 0)
                self.assertEqual(w["errors"], 0)
                self.assertEqual(w["violations"], 0)
                self.assertGreater(w["requests_per_s"], 0)
                answered = sum(op["ok"] for op in w["ops"])
                self.assertEqual(answered, w["requests"])
                for op in w["ops"]:
                    if op["ok"]:
                        self.assertTrue(0 < op["p50_ms"] <= op["p99_ms"] <= op["max_ms"], op)
        self.assertEqual(by_name["txn-put"]["checks"]["txn_succeeded"], by_name["txn-put"]["requests"])
        # delete removes each preloaded key once; a short run may not reach all of them.
        self.assertLessEqual(by_name["delete"]["requests"], 200)
        k8s = by_name["k8s"]["checks"]
        self.assertGreater(k8s["writes_acknowledged"], 0)
        self.assertEqual(k8s["compare_failed"], 0)
        self.assertEqual(k8s["watch_events_min_per_watcher"], k8s["writes_acknowledged"])
        self.assertGreaterEqual(k8s["progress_responses"], 2)
        self.assertGreater(k8s["list_pages"], 0)

    def test_watch_fanout_delivers_every_event(self):
        m = self.new_member()
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "watch.json")
            self.run_tool([WATCH_BENCH, "--endpoints", m.endpoint, "--streams", "4", "--watchers", "40",
                           "--prefixes", "4", "--rate", "200", "--seconds", "2", "--json", out])
            with open(out) as f:
                res = json.load(f)
        self.assertTrue(res["ok"])
        self.assertGreater(res["puts_acked"], 0)
        self.assertEqual(res["put_errors"], 0)
        self.assertEqual(res["events_delivered"], res["events_expected"])
        self.assertEqual(res["watchers_starved"], 0)
        self.assertEqual(res["violations"]["total"], 0)


if __name__ == "__main__":
    harness.main()
