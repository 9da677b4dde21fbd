"""etcd's interceptor refusals on every client method, etcdq beside etcd 3.6.17.

etcd runs one unary and one stream interceptor before every handler of its
client server, Lock and Election included (embed/serve.go registers them on
the same gRPC server): a call whose metadata says "hasleader: true" fails
with Unavailable "etcdserver: no leader" while the member knows no leader,
unary calls and streams alike. This walks every method of every client
service (method_walk.py, from proto/) on the last member of a 3-member
cluster whose two others were SIGKILLed, with that metadata, on etcd 3.6
and then on the binary under test: each call must be refused, and the
answers must be the same.

Before etcdq had one door for these rules (src/server/ruled_service.h),
Lock, Election, Watch, LeaseKeepAlive, Snapshot and Status skipped the
"hasleader" refusal.

Run: ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_call_rules_etcd36.py
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "integration"))

import grpc  # noqa: E402

import cluster  # noqa: E402
import etcd36  # noqa: E402
import harness  # noqa: E402
import method_walk  # noqa: E402

HASLEADER = (("hasleader", "true"),)
NO_LEADER = "UNAVAILABLE etcdserver: no leader"


def leaderless_answers(binary, tc):
    """The walk on the one live member of a 3-member cluster of `binary` that lost two."""
    c = cluster.Cluster(3, heartbeat_ms=100, election_ms=1000, binary=binary)
    tc.track(c)
    c.kill9(0, 1)
    ep = c[2].endpoint
    probe = [m for m in method_walk.client_methods() if m[0] == "/etcdserverpb.KV/Range"][0]
    # A leader that lost its quorum steps down after an election timeout.
    deadline = time.monotonic() + 30
    while True:
        ch = grpc.insecure_channel(ep)
        try:
            answer = method_walk.call_once(ch, *probe, metadata=HASLEADER, timeout=3.0)
        finally:
            ch.close()
        if answer.endswith(NO_LEADER) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    tc.assertTrue(answer.endswith(NO_LEADER), answer)
    answers = method_walk.walk(ep, metadata=HASLEADER)
    c.cleanup()
    return answers


class CallRulesAsEtcd36Test(cluster.ClusterTestCase):
    def test_every_client_method_refuses_hasleader_without_leader_as_etcd36(self):
        reference = leaderless_answers(etcd36.etcd(), self)
        under_test = leaderless_answers(harness.binary_under_test(), self)
        # The walk covers every method proto/ declares for the 8 client services (48 in etcd 3.6).
        self.assertEqual(len(reference), len(method_walk.client_methods()))
        self.assertGreaterEqual(len(reference), 48, reference)
        self.assertEqual(reference, under_test)
        self.assertEqual([a for a in under_test if not a.endswith(NO_LEADER)], [])


if __name__ == "__main__":
    harness.main()
