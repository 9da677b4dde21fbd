"""Learners through etcdctl 3.6, etcdq beside etcd 3.6.17 doing the same steps.

The same scenario runs on a 3-member etcd 3.6 cluster, then on a 3-member
cluster of the binary under test, and each step's output (what etcdctl
prints and its exit status, member ids and ports masked, lines sorted where
the order follows the member ids) must be the same:

- `member add m3 --learner --peer-urls=...` and the ETCD_* lines it prints;
  a second learner is refused ("too many learner members in cluster");
- `member promote` of the learner before it started is refused ("can only
  promote a learner member which is in sync with leader");
- the learner started with --initial-cluster-state existing;
  `member list` shows it (IS LEARNER true);
- on the learner's own endpoint: serializable get and endpoint status work,
  everything else gets "etcdserver: rpc not supported for learner" (put,
  linearizable get, del, txn, member list, lease grant, compaction, alarm
  list, auth status, downgrade validate, lock, watch) as etcd's interceptors
  refuse it, and snapshot save works (etcd 3.6 lets a learner stream one);
  every method of every client service called with an empty request gets
  the same answer from both (method_walk.py; Lock and Election included);
- the gRPC status of those refusals is FailedPrecondition (etcd 3.6; 3.5
  said Unavailable);
- a learner does not vote: with 2 of the 3 voters killed the put on the
  last voter fails although the learner runs; both voters back, it works;
- `member promote` then succeeds and `member list` shows 4 voters.

Run: ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_learners_etcd36.py
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "integration"))

import cluster  # noqa: E402
import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
import etcd36  # noqa: E402
import harness  # noqa: E402
import method_walk  # noqa: E402


def sorted_lines(text):
    return "\n".join(sorted(text.splitlines()))


def normalized_member_add(text):
    """etcdctl lists ETCD_INITIAL_CLUSTER in member id order: sort its entries."""
    def sort_cluster(m):
        return 'ETCD_INITIAL_CLUSTER="%s"' % ",".join(sorted(m.group(1).split(",")))
    return etcd36.mask(re.sub(r'ETCD_INITIAL_CLUSTER="([^"]*)"', sort_cluster, text))


def raw_learner_codes(ep):
    """The status a learner gives a Put and a Watch stream (etcd 3.6: FailedPrecondition,
    3.5 said Unavailable, which clientv3 retries forever on a watch)."""
    out = []
    ch = grpc.insecure_channel(ep)
    try:
        try:
            rpc_pb2_grpc.KVStub(ch).Put(rpc_pb2.PutRequest(key=b"x", value=b"y"), timeout=5)
            out.append("Put OK")
        except grpc.RpcError as e:
            out.append("Put %s %s" % (e.code().name, e.details()))
        reqs = iter([rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"k"))])
        try:
            for _ in rpc_pb2_grpc.WatchStub(ch).Watch(reqs, timeout=5):
                pass
            out.append("Watch ended")
        except grpc.RpcError as e:
            out.append("Watch %s %s" % (e.code().name, e.details()))
    finally:
        ch.close()
    return "\n".join(out)


class LearnerScenario:
    """One run of the scenario on a fresh cluster of `binary`; self.steps is [(name, text)]."""

    def __init__(self, binary, tc):
        self.tc = tc
        self.steps = []
        self.c = cluster.Cluster(3, heartbeat_ms=100, election_ms=1000, binary=binary)
        tc.track(self.c)

    def record(self, name, text):
        self.steps.append((name, text))

    def ctl(self, endpoints, *args, timeout=60):
        return etcd36.etcdctl(endpoints, *args, timeout=timeout)

    def voters(self):
        return ",".join(self.c[i].endpoint for i in range(3) if self.c[i].running())

    def run(self):
        c = self.c
        ctl = self.ctl
        r = ctl(self.voters(), "put", "k", "v")
        self.tc.assertEqual(r.rc, 0, r)
        learner = cluster.ClusterMember(c, "m3")
        c.members.append(learner)
        # --strict-reconfig-check refuses the add until every voter has been
        # connected to the leader for 5 s (etcd: "unhealthy cluster"): retry that.
        deadline = time.monotonic() + 30
        while True:
            r = ctl(self.voters(), "member", "add", "m3", "--learner", "--peer-urls=" + learner.peer_url)
            if r.rc == 0 or "unhealthy cluster" not in r.error or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.record("member add --learner", normalized_member_add(r.text()))
        self.tc.assertEqual(r.rc, 0, r)
        learner.initial_cluster = re.search(r'ETCD_INITIAL_CLUSTER="([^"]*)"', r.out).group(1)
        learner.initial_state = "existing"
        learner.learner = True
        # etcdctl prints the id with %16x: an id below 2^60 comes space-padded.
        learner_id = re.search(r"Member\s+([0-9a-f]+) added", r.out).group(1)

        spare = harness.free_port()
        r = ctl(self.voters(), "member", "add", "m4", "--learner", "--peer-urls=http://127.0.0.1:%d" % spare)
        self.record("second learner", r.text())
        r = ctl(self.voters(), "member", "list")
        self.record("member list, learner unstarted", sorted_lines(etcd36.mask(r.text())))
        r = ctl(self.voters(), "member", "promote", learner_id)
        self.record("promote the unstarted learner", etcd36.mask(r.text()))

        learner.start()
        ep = learner.endpoint
        deadline = time.monotonic() + 30
        while True:
            r = ctl(ep, "get", "k", "--consistency=s")
            if r.out == "k\nv\n" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.record("learner: serializable get", r.text())
        r = ctl(self.voters(), "member", "list")
        self.record("member list, learner started", sorted_lines(etcd36.mask(r.text())))
        r = ctl(ep, "endpoint", "status", "-w", "json")
        st = json.loads(r.out)[0]["Status"] if r.rc == 0 else {}
        self.record("learner: endpoint status isLearner", "%s exit %d" % (st.get("isLearner"), r.rc))
        for args in (["put", "x", "1"], ["get", "k"], ["del", "k"], ["member", "list"],
                     ["lease", "grant", "10"], ["compaction", "1"], ["alarm", "list"], ["auth", "status"],
                     ["downgrade", "validate", "3.5"], ["endpoint", "hashkv"],
                     ["--command-timeout", "5s", "lock", "l"], ["--command-timeout", "5s", "elect", "e", "v"]):
            r = ctl(ep, *args, timeout=30)
            self.record("learner: " + " ".join(args), etcd36.mask(r.text()))
        try:
            r = ctl(ep, "watch", "k", timeout=20)
            self.record("learner: watch", r.text())
        except subprocess.TimeoutExpired:
            self.record("learner: watch", "still watching after 20 s")
        self.record("learner: gRPC codes", raw_learner_codes(ep))
        # Every client method with an empty request (method_walk.py): refused
        # before its handler but Status, serializable Range (not this empty
        # one) and Snapshot; Lock and Election too, as etcd's interceptor
        # covers them.
        self.record("learner: every client method", "\n".join(method_walk.walk(ep)))
        snap = os.path.join(learner.dir, "learner-snapshot.db")
        r = ctl(ep, "snapshot", "save", snap)
        self.record("learner: snapshot save exit status", "exit %d" % r.rc)

        # A learner does not vote: 2 of 3 voters down is no quorum.
        r = ctl(self.voters(), "put", "before", "1")
        self.tc.assertEqual(r.rc, 0, r)
        c.kill9(0, 1)
        r = ctl(c[2].endpoint, "--command-timeout", "4s", "put", "quorum", "1", timeout=30)
        self.record("put with 1 of 3 voters and the learner up fails", "exit %d" % r.rc)
        c.restart(0, wait=False)
        c.restart(1, wait=False)
        c.wait_serving([0, 1, 2])
        deadline = time.monotonic() + 30
        while True:
            r = ctl(self.voters(), "put", "quorum", "1")
            if r.rc == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.record("put with the voters back", r.text())

        deadline = time.monotonic() + 60
        refusals = set()
        while True:
            r = ctl(self.voters(), "member", "promote", learner_id)
            if r.rc == 0 or time.monotonic() > deadline:
                break
            refusals.add(r.error)
            time.sleep(0.5)
        self.tc.assertLessEqual(refusals, {"Error: etcdserver: can only promote a learner member which is in "
                                           "sync with leader"}, refusals)
        self.record("promote", etcd36.mask(r.text()))
        learner.learner = False
        r = ctl(self.voters(), "member", "list")
        self.record("member list after promote", sorted_lines(etcd36.mask(r.text())))
        deadline = time.monotonic() + 20
        while True:
            r = ctl(ep, "put", "x", "2")
            if r.rc == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.record("promoted member takes a put", r.text())
        return self.steps


class LearnersAsEtcd36Test(cluster.ClusterTestCase):
    def test_learner_lifecycle_matches_etcd36(self):
        ref = LearnerScenario(etcd36.etcd(), self)
        reference = ref.run()
        # Its logs stay for a failure report; its CPU goes to the next. SIGKILL:
        # nothing is asked of the stop, and etcd 3.6's graceful one waited out
        # its request timeout (about 7 s) for the test's open client channels.
        ref.c.kill9(*ref.c.live())
        under_test = LearnerScenario(harness.binary_under_test(), self).run()
        if os.environ.get("ETCD36_SHOW_STEPS"):
            for (n, a), (_, b) in zip(reference, under_test):
                self.note("%s:\n%s\n---\n%s" % (n, a, b))
        self.assertEqual([n for n, _ in reference], [n for n, _ in under_test])
        diffs = ["%s:\n  etcd 3.6: %r\n  %s: %r" % (n, a, os.path.basename(harness.binary_under_test()), b)
                 for (n, a), (_, b) in zip(reference, under_test) if a != b]
        self.assertEqual(diffs, [], "\n" + "\n".join(diffs))


if __name__ == "__main__":
    harness.main()
