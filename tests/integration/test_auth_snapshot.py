"""etcd's snapshot file carries the auth state (src/etcd_snapshot/writer.h):
a snapshot saved from a member with auth on, restored with etcdutl and
started with etcd 3.6 (the oracle), has auth enabled, the same users and roles,
and accepts the root password (the bcrypt hash written by libcrypt verifies
in Go's bcrypt).
"""
import os
import subprocess
import tempfile

import harness

ETCDCTL = harness.ETCDCTL


def etcdctl(endpoint, *args, check=True):
    p = subprocess.run([ETCDCTL, "--endpoints", endpoint, "--command-timeout=10s"] + list(args),
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, ETCDCTL_API="3"))
    if check and p.returncode != 0:
        raise AssertionError("etcdctl %s: %s %s" % (" ".join(args), p.stdout, p.stderr))
    return p


class AuthSnapshotTest(harness.MemberTestCase):

    def test_snapshot_restored_into_etcd_keeps_users_roles_and_auth_enabled(self):
        m = self.new_member(extra_args=["--bcrypt-cost", "4"])
        ep = m.endpoint
        etcdctl(ep, "user", "add", "root:pw")
        etcdctl(ep, "role", "add", "root")
        etcdctl(ep, "user", "grant-role", "root", "root")
        etcdctl(ep, "role", "add", "reader")
        etcdctl(ep, "role", "grant-permission", "--prefix", "reader", "read", "p/")
        etcdctl(ep, "user", "add", "alice:apw")
        etcdctl(ep, "user", "grant-role", "alice", "reader")
        etcdctl(ep, "auth", "enable")
        etcdctl(ep, "--user", "root:pw", "put", "p/x", "1")
        d = tempfile.mkdtemp(prefix="etcdq-auth-snap-")
        snap = os.path.join(d, "snap.db")
        etcdctl(ep, "--user", "root:pw", "snapshot", "save", snap)
        m.stop()
        restored = os.path.join(d, "restored")
        # etcdctl 3.6 has no `snapshot restore`: etcdutl has it.
        subprocess.run([harness.ETCDUTL, "snapshot", "restore", snap, "--data-dir", restored], check=True,
                       capture_output=True)
        e = self.new_member(binary=harness.DEFAULT_BINARY, start=False)
        e.data_dir = restored
        e.extra_args = []
        try:
            e.proc = subprocess.Popen(e.args(), stdout=open(e.log_path, "a"), stderr=subprocess.STDOUT,
                                      start_new_session=True)
            e.pids.append(e.proc.pid)
            # Anonymous reads are refused once auth is on: wait on root's.
            for _ in range(100):
                if etcdctl(e.endpoint, "--user", "root:pw", "get", "p/x", check=False).returncode == 0:
                    break
                harness.time.sleep(0.2)
            self.assertEqual(etcdctl(e.endpoint, "--user", "root:pw", "user", "list").stdout.split(),
                             ["alice", "root"])
            self.assertEqual(etcdctl(e.endpoint, "--user", "root:pw", "role", "list").stdout.split(),
                             ["reader", "root"])
            self.assertEqual(etcdctl(e.endpoint, "--user", "alice:apw", "get", "p/x", "--print-value-only")
                             .stdout.strip(), "1")
            refused = etcdctl(e.endpoint, "get", "p/x", check=False)
            self.assertIn("etcdserver: user name is empty", refused.stderr)
        finally:
            e.cleanup()
            harness.shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    harness.main()
