#!/usr/bin/python3
"""Snapshot installs that go wrong: the member sending the state is killed as
a follower starts installing it, a follower is killed in the middle of an
install, and every member that could send the state is killed during one. In both, the follower must end with exactly the state of the others
(same keys, same revision, same HashKV), never serve an empty or partial
state, and the cluster must keep serving while a quorum is up.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_snapshot_install.py

etcdq-only: an etcd 3.4 follower gets the state inside the snapshot message,
so these failure points do not exist there (the test skips against etcd).
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, is_reference_etcd, main, rpc_pb2  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500
SNAPSHOT_COUNT = 50
VALUE = os.urandom(4000)


def load(kv, txns, prefix=b"big/"):
    """`txns` Txns of 100 Puts of 4 KB each (enough that a transfer takes a
    moment), then 100 small Puts: more log entries than the leader keeps
    behind a snapshot (--snapshot-count), so the follower needs one."""
    for t in range(txns):
        ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=prefix + b"%07d" % (t * 100 + k), value=VALUE))
               for k in range(100)]
        kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=30)
    for k in range(100):
        kv.Put(rpc_pb2.PutRequest(key=prefix + b"small/%d" % k, value=b"x"), timeout=10)


def log_count(member, text):
    with open(member.log_path, errors="replace") as f:
        return f.read().count(text)


def lag_until_install(c, leader, follower, txns):
    """Kills `follower`, loads the leader, restarts the follower and returns as
    soon as it starts installing a snapshot. How far the leader's log reaches
    back depends on when it took its snapshots, so this tries a few times."""
    for _ in range(3):
        before = log_count(c.members[follower], "installing the snapshot")
        c.kill9(follower)
        load(c.kv(leader), txns)
        c.restart(follower, wait=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if log_count(c.members[follower], "installing the snapshot") > before:
                return
            time.sleep(0.005)
        c.wait_serving()
    raise AssertionError("m%d never needed a snapshot" % follower)


@unittest.skipIf(is_reference_etcd(), "etcdq's snapshot transfer only")
class SnapshotInstallTest(ClusterTestCase):
    def new(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS, snapshot_count=SNAPSHOT_COUNT)
        leader = c.leader_index()
        follower = next(i for i in range(3) if i != leader)
        other = 3 - leader - follower
        return c, leader, follower, other

    def assert_converged(self, c):
        """Every member answers with the same keys and revision, and the same HashKV."""
        deadline = time.monotonic() + 30
        while True:
            states = {}
            for i in range(3):
                try:
                    states[i] = c.serializable_range(i)
                except Exception as e:  # noqa: BLE001 - a member still starting
                    states[i] = repr(e)
            if all(states[i] == states[0] for i in range(3)):
                break
            if time.monotonic() > deadline:
                self.fail("members disagree: %s" % {i: (s if isinstance(s, str) else (len(s[0]), s[1]))
                                                    for i, s in states.items()})
            time.sleep(0.5)
        out = c.etcdctl("endpoint", "hashkv", "--cluster")
        hashes = {line.split(", ")[1] for line in out.strip().splitlines()}
        self.assertEqual(len(hashes), 1, out)

    def test_source_killed_as_the_install_starts(self):
        c, leader, follower, other = self.new()
        lag_until_install(c, leader, follower, 40)
        c.kill9(leader)
        # The follower takes the state from the other member (or stops and
        # fetches it at its next start); the two keep a quorum either way.
        time.sleep(3)
        if not c.members[follower].running():
            c.restart(follower, wait=False)
        r = c.kv(other).Put(rpc_pb2.PutRequest(key=b"after", value=b"x"), timeout=15)
        self.assertGreater(r.header.revision, 140)  # at least 40 Txns and 100 Puts before it
        c.restart(leader)
        for i in range(3):
            c.kv(i).Put(rpc_pb2.PutRequest(key=b"late/%d" % i, value=b"x"), timeout=15)
        self.assert_converged(c)

    def test_follower_killed_in_the_middle_of_an_install(self):
        c, leader, follower, other = self.new()
        lag_until_install(c, leader, follower, 80)
        time.sleep(0.2)
        c.kill9(follower)
        # The state moves on: the checkpoint the install started from is gone.
        for k in range(200):
            c.kv(leader).Put(rpc_pb2.PutRequest(key=b"t/%d" % k, value=b"x"), timeout=10)
        c.restart(follower)
        self.assertTrue(c.members[follower].running())
        self.assert_converged(c)

    def test_every_source_killed_during_an_install_member_waits_and_recovers(self):
        # Once gave up after 3 tries and exited with code 70 (a supervisor that
        # restarts on failure had to bring it back); now it keeps trying with
        # backoff, stays up, and finishes once a source is back.
        c, leader, follower, other = self.new()
        lag_until_install(c, leader, follower, 40)
        c.kill9(leader, other)
        time.sleep(6)
        self.assertTrue(c.members[follower].running(), "the installing member exited with no source")
        self.assertEqual(log_count(c.members[follower], "trying again") > 0, True)
        c.restart(leader, wait=False)
        c.restart(other, wait=False)
        c.wait_serving()
        self.assertTrue(c.members[follower].running())
        for i in range(3):
            c.kv(i).Put(rpc_pb2.PutRequest(key=b"late/%d" % i, value=b"x"), timeout=15)
        self.assert_converged(c)


if __name__ == "__main__":
    main()
