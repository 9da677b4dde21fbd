#!/usr/bin/python3
"""Leader failover under write load: SIGKILL the leader of a 3-member cluster while
a writer keeps sending Puts round-robin to every member; writes resume soon after a
new leader is elected; the old leader restarts and catches up; every acknowledged
Put is on every member with the revision it was acknowledged with, and
`etcdctl endpoint hashkv --cluster` agrees.

    /usr/bin/python3 tests/cluster/test_failover.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_failover.py

Timing bound, and why it is honest: the writer is open-loop (a Put every 20 ms,
whatever happened to earlier ones, each with a 2 s deadline), so a Put stuck on
a member that lost its leader never delays the next one. t_elected is the first
time a Status poll (every 20 ms on each survivor) shows a new leader; t_resume
is when the first Put sent after the kill was acknowledged. A Put sent after the
kill can only commit through the new leader, so t_resume - t_elected is how long
the cluster takes to accept writes once it has a leader; it must stay within
2 x election timeout.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from cluster import ClusterStub35, ClusterTestCase, Writer, main, v35  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500
PREFIX = b"failover/"


class LeaderWatch:
    """Polls Status on the given members (persistent channels) and records when one of
    them first reports a leader other than `old_id`."""

    def __init__(self, cluster, indexes, old_id, poll_s=0.02):
        self.stubs = {i: ClusterStub35(cluster.members[i].channel()) for i in indexes}
        self.old_id = old_id
        self.poll_s = poll_s
        self.t_elected = None
        self.new_leader_id = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-watch", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set() and self.t_elected is None:
            for st in self.stubs.values():
                try:
                    s = st.Status(v35.StatusRequest(), timeout=0.5)
                except grpc.RpcError:
                    continue
                if s.leader not in (0, self.old_id):
                    self.t_elected = time.monotonic()
                    self.new_leader_id = s.leader
                    break
            self._stop.wait(self.poll_s)

    def wait(self, timeout):
        self._thread.join(timeout)
        self._stop.set()
        return self.t_elected


class FailoverTest(ClusterTestCase):

    def test_writes_resume_after_leader_sigkill_and_no_acknowledged_write_is_lost(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        old = c.leader_index()
        old_id = c.member_id(old)
        survivors = [i for i in range(3) if i != old]
        for i in survivors:
            c.member_id(i)

        w = Writer(c, targets=[0, 1, 2], prefix=PREFIX, interval=0.02, deadline=2.0).start()
        time.sleep(1.5)
        before = w.successes()
        self.assertGreater(len(before), 20, "writes before the kill: %s" % w.error_counts())
        self.assertEqual(w.failures(), [], "writes failed before any fault: %s" % w.error_counts())
        self.assertEqual({a.target for a in before}, {0, 1, 2})

        watch = LeaderWatch(c, survivors, old_id)
        c.kill9(old)
        t_kill = time.monotonic()
        watch.start()
        t_elected = watch.wait(timeout=15)
        self.assertIsNotNone(t_elected, "no new leader within 15 s of the kill")
        new = c.index_of_id(watch.new_leader_id)
        self.assertIn(new, survivors)

        deadline = time.monotonic() + 10
        while w.first_success_after(t_kill) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        t_resume = w.first_success_after(t_kill)
        self.assertIsNotNone(t_resume, "no write succeeded within 10 s after the new leader; errors: %s"
                             % w.error_counts())
        self.note("leader m%d killed; new leader m%d seen after %.3f s; first write acknowledged "
                  "%.3f s after the kill, %.3f s after the new leader was seen (bound %.3f s)" % (
                      old, new, t_elected - t_kill, t_resume - t_kill, t_resume - t_elected,
                      2 * ELECTION_MS / 1000))
        self.assertLessEqual(t_resume - t_elected, 2 * ELECTION_MS / 1000,
                             "writes resumed %.3f s after the new leader appeared" % (t_resume - t_elected))

        # Writes keep flowing through the survivors while the old leader is down.
        time.sleep(1.0)
        recent = w.successes(since=time.monotonic() - 0.8)
        self.assertEqual({a.target for a in recent}, set(survivors), "writes via survivors after failover")

        c.restart(old)
        t_back = time.monotonic()
        deadline = time.monotonic() + 10
        while not [a for a in w.successes(since=t_back) if a.target == old] and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue([a for a in w.successes(since=t_back) if a.target == old],
                        "no write through the restarted old leader m%d succeeded" % old)
        time.sleep(0.5)
        w.stop()

        acked = w.acked()
        failures = w.failures()
        self.note("%d Puts sent, %d acknowledged, %d failed: %s" % (
            len(w.attempts), len(acked), len(failures), w.error_counts()))
        revisions = [rev for _v, rev in acked.values()]
        self.assertEqual(len(set(revisions)), len(revisions), "two acknowledged Puts share a revision")
        # Failures happen only around the kill and the restart (a Put to the dead member,
        # or one stuck on a follower that had lost its leader).
        for a in failures:
            self.assertTrue(t_kill - 2.5 <= a.start <= t_elected + 0.5 or (a.target == old and a.start >= t_kill),
                            "Put to m%d at +%.3f s failed outside the failover: %s" % (
                                a.target, a.start - t_kill, a.error))

        c.assert_acked_everywhere(acked, PREFIX)
        views = [c.serializable_range(i, PREFIX)[0] for i in range(3)]
        self.assertEqual(views[0], views[1])
        self.assertEqual(views[0], views[2])
        out = c.assert_same_hashkv(self)
        self.note("hashkv: %s" % [(e["Endpoint"], e["HashKV"]["hash"], e["HashKV"]["header"]["revision"])
                                  for e in out])


if __name__ == "__main__":
    main()
