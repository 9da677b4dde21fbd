#!/usr/bin/python3
"""A 5-member cluster survives losing two members at once, the leader among them:
the three survivors elect a leader and keep acknowledging writes; after the two
restart, every acknowledged write is on all five members with the revision it
was acknowledged with, and hashkv agrees.

    /usr/bin/python3 tests/cluster/test_five_members.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_five_members.py

The writer and the resume bound are test_failover.py's (see there).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, Writer, main  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 100, 1000    # five members on two busy cores: no spurious elections
PREFIX = b"five/"


class FiveMemberTest(ClusterTestCase):

    def test_two_simultaneous_sigkills_including_the_leader_lose_no_acknowledged_write(self):
        c = self.new_cluster(5, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        leader = c.leader_index()
        leader_id = c.member_id(leader)
        victims = [leader, (leader + 2) % 5]
        survivors = [i for i in range(5) if i not in victims]

        w = Writer(c, targets=list(range(5)), prefix=PREFIX, interval=0.02, deadline=2.0).start()
        time.sleep(1.5)
        self.assertEqual(w.failures(), [], "writes failed before any fault: %s" % w.error_counts())
        self.assertEqual({a.target for a in w.successes()}, set(range(5)))

        c.kill9(*victims)
        t_kill = time.monotonic()
        new = c.wait_leader(timeout=20, exclude_ids=(leader_id,), poll_s=0.02)
        t_elected = time.monotonic()
        self.assertIn(new, survivors)
        deadline = time.monotonic() + 10
        while w.first_success_after(t_kill) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        t_resume = w.first_success_after(t_kill)
        self.assertIsNotNone(t_resume, "no write succeeded after the kill: %s" % w.error_counts())
        self.note("killed m%d (leader) and m%d; new leader m%d seen after %.3f s; first write acknowledged "
                  "%.3f s after the kill, %+.3f s after the new leader was seen (bound %.1f s)" % (
                      victims[0], victims[1], new, t_elected - t_kill, t_resume - t_kill,
                      t_resume - t_elected, 2 * ELECTION_MS / 1000))
        self.assertLessEqual(t_resume - t_elected, 2 * ELECTION_MS / 1000)

        # Three of five keep the cluster writable through every survivor.
        time.sleep(1.5)
        t = time.monotonic()
        recent = w.successes(since=t - 1.0)
        self.assertEqual({a.target for a in recent}, set(survivors), "writes via every survivor")
        self.assertFalse([a for a in w.failures(since=t - 1.0) if a.target in survivors],
                         "writes via survivors still failing 1.5 s after the election")

        for i in victims:
            c.restart(i, wait=False)
        c.wait_serving()
        t_back = time.monotonic()
        deadline = time.monotonic() + 10
        while {a.target for a in w.successes(since=t_back)} != set(range(5)) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual({a.target for a in w.successes(since=t_back)}, set(range(5)),
                         "writes through every member after the restart")
        w.stop()

        acked = w.acked()
        self.note("%d Puts sent, %d acknowledged; failures: %s" % (len(w.attempts), len(acked), w.error_counts()))
        revisions = [rev for _v, rev in acked.values()]
        self.assertEqual(len(set(revisions)), len(revisions), "two acknowledged Puts share a revision")
        c.assert_acked_everywhere(acked, PREFIX)
        views = [c.serializable_range(i, PREFIX)[0] for i in range(5)]
        for i in range(1, 5):
            self.assertEqual(views[i], views[0], "m%d and m0 differ" % i)
        c.assert_same_hashkv(self)


if __name__ == "__main__":
    main()
