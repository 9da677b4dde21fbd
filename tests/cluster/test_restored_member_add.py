"""A member added to a cluster made by `snapshot restore` gets the restored
state (issue: it got none of it).

`etcdctl snapshot save` from a member with some history, `snapshot restore`
(etcdq's, or etcdutl's when the binary is etcd 3.6) into a new cluster's
data dirs, start it, then add a learner (promoted) and a voter: each new
member's linearizable read sees every restored key at its revision, and
`endpoint hashkv` is the same on every member; again after every member
restarted, and for a member added after that restart.

Before the fix the restored members' Raft log started with the bootstrap
configuration entry, which a leader sent a new member instead of a snapshot:
it applied the log on an empty state (revision 2, no restored key).
etcd 3.6 (etcdutl writes a Raft snapshot at the restored commit index) passes.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, all_keys_request, harness, main  # noqa: E402


N_KEYS = 300


def restore_args(snap, m):
    return ["snapshot", "restore", snap, "--name", m.name, "--data-dir", m.data_dir,
            "--initial-cluster", m.initial_cluster, "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster-token", m.cluster.token]


class RestoredClusterMemberAdd(ClusterTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="etcdq-restored-add-")
        self.snap = os.path.join(self.tmp, "backup.db")
        src = harness.Member(name="src")
        try:
            cli = src.client()
            for i in range(N_KEYS):
                cli.put("restored/%04d" % i, "v%d" % i)
            for i in range(0, N_KEYS, 3):
                cli.put("restored/%04d" % i, "w%d" % i)   # history: revision > key count
            for i in range(1, N_KEYS, 10):
                cli.delete("restored/%04d" % i)
            p = subprocess.run([harness.ETCDCTL, "--endpoints", src.endpoint, "snapshot", "save", self.snap],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            cli.close()
        finally:
            src.cleanup()

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def restored_state(self, i, linearizable=True):
        req = all_keys_request(serializable=not linearizable)
        resp = self.c.kv(i).Range(req, timeout=10)
        return {kv.key: (kv.value, kv.create_revision, kv.mod_revision, kv.version) for kv in resp.kvs}

    def check_everywhere(self, want, what):
        for i in self.c.live():
            m = self.c[i]
            got = self.restored_state(i, linearizable=not m.learner)
            self.assertEqual(len(got), len(want), "%s: %r has %d keys, the backup %d" % (what, m, len(got), len(want)))
            self.assertEqual(got, want, "%s: %r differs from the backup" % (what, m))
        self.c.assert_same_hashkv(self)

    def test_learner_and_voter_added_to_restored_cluster(self):
        self.c = c = self.new_cluster(size=3, heartbeat_ms=50, election_ms=500, start=False)
        tool = [harness.ETCDUTL] if harness.is_reference_etcd() else [c.binary]
        for m in c.members:
            p = subprocess.run(tool + restore_args(self.snap, m), capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for m in c.members:
            m.spawn()
        c.wait_serving()
        want = self.restored_state(0)
        self.assertEqual(len(want), N_KEYS - N_KEYS // 10)

        # A learner, promoted.
        j = c.add_member(learner=True)
        if c.member_add_refusals:   # asked before the leader's log dropped the bootstrap entry
            self.note("MemberAdd refused first: %s" % c.member_add_refusals[-1][1])
        c.promote(j)
        deadline = time.monotonic() + 10
        while c[j].status().isLearner:   # until it applied its promotion
            self.assertLess(time.monotonic(), deadline, "%r still a learner" % c[j])
            time.sleep(0.05)
        self.check_everywhere(want, "learner promoted")
        # A voter.
        c.add_member(learner=False)
        self.check_everywhere(want, "voter added")

        # Every member restarted: the restored one and the new ones.
        for i in c.live():
            c.stop(i)
        for i in range(len(c.members)):
            c[i].spawn()
        c.wait_serving()
        self.check_everywhere(want, "after a restart")
        # And a member added after the restart.
        c.add_member(learner=False)
        self.check_everywhere(want, "voter added after the restart")


if __name__ == "__main__":
    main()
