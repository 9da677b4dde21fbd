#!/usr/bin/python3
"""Linearizable reads in a 3-member cluster are never stale: a write acknowledged
by one member is seen by a linearizable Range on any other member sent after the
acknowledgment, in steady state, across a leader SIGKILL and election, and on the
old leader once it has restarted.

    /usr/bin/python3 tests/cluster/test_linearizable_reads.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_linearizable_reads.py

The check under failover is by revision, so in-doubt writes (a Put that timed out
may still commit later) cannot make a correct read look stale: a linearizable
Range sent after a Put of the probed key was acknowledged at revision r must
return the key with mod_revision >= r and a header revision >= r.
"""
import bisect
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from cluster import ClusterTestCase, main, rpc_error_text, rpc_pb2  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500
ITERATIONS = int(os.environ.get("LINEARIZABLE_ITERATIONS", "300"))


def retry_put(kv_by_member, order, key, value, timeout_s=15.0):
    """Puts through the members in `order` until one acknowledges; returns (member, revision)."""
    deadline = time.monotonic() + timeout_s
    errors = []
    n = 0
    while time.monotonic() < deadline:
        i = order[n % len(order)]
        n += 1
        try:
            r = kv_by_member[i].Put(rpc_pb2.PutRequest(key=key, value=value), timeout=2.0)
            return i, r.header.revision
        except grpc.RpcError as e:
            errors.append("m%d %s" % (i, rpc_error_text(e)))
            time.sleep(0.02)
    raise AssertionError("no member acknowledged a Put of %r within %.0f s: %s" % (key, timeout_s, errors[-5:]))


class LinearizableReadTest(ClusterTestCase):

    def write_then_read_elsewhere(self, c, members, iterations, key):
        """Put via members[n], linearizable Range via another member at once, n times."""
        kv = {i: c.kv(i) for i in members}
        for n in range(iterations):
            i = members[n % len(members)]
            others = [j for j in members if j != i]
            j = others[(n // len(members)) % len(others)]
            value = b"%d-via-m%d" % (n, i)
            rev = kv[i].Put(rpc_pb2.PutRequest(key=key, value=value), timeout=5).header.revision
            r = kv[j].Range(rpc_pb2.RangeRequest(key=key), timeout=5)
            self.assertEqual(len(r.kvs), 1, "iteration %d: m%d read nothing" % (n, j))
            self.assertEqual((r.kvs[0].value, r.kvs[0].mod_revision), (value, rev),
                             "iteration %d: wrote %r at %d via m%d, m%d read %r at %d (stale)" % (
                                 n, value, rev, i, j, r.kvs[0].value, r.kvs[0].mod_revision))
            self.assertGreaterEqual(r.header.revision, rev)

    def test_write_on_one_member_is_read_on_another_at_once(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        t0 = time.monotonic()
        self.write_then_read_elsewhere(c, [0, 1, 2], ITERATIONS, b"lin/steady")
        self.note("%d write-then-read pairs in %.2f s" % (ITERATIONS, time.monotonic() - t0))

    def test_reads_are_never_stale_across_leader_sigkill_and_restart(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        old = c.leader_index()
        old_id = c.member_id(old)
        key = b"lin/counter"
        lock = threading.Lock()
        acks = []            # (ack time, revision), in ack order (one writer)
        reads = []           # (member, start, mod_revision, header revision)
        read_errors = {}
        stop = threading.Event()

        def writer():
            kv = {i: c.members[i].kv() for i in range(3)}
            n = 0
            while not stop.is_set():
                i = n % 3
                n += 1
                try:
                    r = kv[i].Put(rpc_pb2.PutRequest(key=key, value=b"%d" % n), timeout=1.0)
                except grpc.RpcError:
                    continue
                with lock:
                    acks.append((time.monotonic(), r.header.revision))

        def reader(i):
            kv = c.members[i].kv()
            while not stop.is_set():
                start = time.monotonic()
                try:
                    r = kv.Range(rpc_pb2.RangeRequest(key=key), timeout=1.0)
                except grpc.RpcError as e:
                    with lock:
                        read_errors[rpc_error_text(e)] = read_errors.get(rpc_error_text(e), 0) + 1
                    time.sleep(0.01)
                    continue
                with lock:
                    reads.append((i, start, r.kvs[0].mod_revision if r.kvs else 0, r.header.revision))

        threads = [threading.Thread(target=writer, daemon=True)] + [
            threading.Thread(target=reader, args=(i,), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        c.kill9(old)
        t_kill = time.monotonic()
        new = c.wait_leader(timeout=15, exclude_ids=(old_id,))
        t_elected = time.monotonic()
        time.sleep(1.5)
        c.restart(old)
        t_restarted = time.monotonic()
        # Keep going until the old leader has served a good number of reads (its reader's
        # channel may wait out a ~2 s reconnect backoff first).
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            with lock:
                if len([r for r in reads if r[0] == old and r[1] >= t_restarted]) >= 50:
                    break
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(10)

        ack_times = [t for t, _ in acks]
        max_rev_by = []      # running max of acknowledged revisions, in ack order
        m = 0
        for _, rev in acks:
            m = max(m, rev)
            max_rev_by.append(m)
        stale = []
        for i, start, mod_rev, header_rev in reads:
            k = bisect.bisect_left(ack_times, start)   # acks strictly before the read was sent
            must_see = max_rev_by[k - 1] if k else 0
            if mod_rev < must_see or header_rev < must_see:
                stale.append((i, round(start - t_kill, 3), mod_rev, header_rev, must_see))
        after_election = [r for r in reads if r[1] >= t_elected]
        on_old_after_restart = [r for r in reads if r[0] == old and r[1] >= t_restarted]
        self.note("old leader m%d, new m%d; %d acked writes, %d reads (%d after the election, %d on the "
                  "restarted old leader), read errors: %s" % (
                      old, new, len(acks), len(reads), len(after_election), len(on_old_after_restart), read_errors))
        self.assertEqual(stale, [], "stale linearizable reads (member, +s after kill, mod_rev, header rev, "
                                    "acked before the read): %s" % stale[:10])
        self.assertGreater(len([a for a in ack_times if a > t_elected]), 10, "too few writes after the election")
        self.assertGreater(len({r[0] for r in after_election}), 1, "reads after the election came from one member")
        self.assertGreaterEqual(len(on_old_after_restart), 50, "too few reads on the restarted old leader")

        # And the plain write-here-read-there loop over the healed cluster, old leader included.
        self.write_then_read_elsewhere(c, [0, 1, 2], 60, b"lin/healed")


if __name__ == "__main__":
    main()
