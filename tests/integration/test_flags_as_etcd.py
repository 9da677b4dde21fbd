#!/usr/bin/python3
"""Command-line flags behave as etcd's (Go's flag package): a flag given
twice takes its last value, as unit files that append an override expect
(etcdq once refused to start: "At Most 1 required but received 2"). A new
member whose --initial-advertise-peer-urls are not what --initial-cluster
lists for it is refused, with etcd's message (etcdq once started anyway).
--help shows each flag's default and names the offline restore command.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_flags_as_etcd.py
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def txn_of_puts(endpoint, n):
    body = "\n".join("put k%d v" % i for i in range(n))
    return subprocess.run([harness.ETCDCTL, "--endpoints", endpoint, "txn"], input="\n\n" + body + "\n\n",
                          capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"), timeout=30)


class FlagsAsEtcd(harness.MemberTestCase):
    def test_a_flag_given_twice_takes_the_last_value(self):
        m = self.new_member(["--max-txn-ops", "1", "--max-txn-ops", "3"])
        ok = txn_of_puts(m.endpoint, 3)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        refused = txn_of_puts(m.endpoint, 4)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("too many operations in txn request", refused.stderr)

    def test_advertised_peer_url_missing_from_initial_cluster_is_refused(self):
        d = tempfile.mkdtemp(prefix="etcdq-flags-")
        try:
            cp, pp, other = harness.free_port(), harness.free_port(), harness.free_port()
            args = [harness.binary_under_test(), "--name", "a", "--data-dir", os.path.join(d, "data"),
                    "--listen-client-urls", "http://127.0.0.1:%d" % cp,
                    "--advertise-client-urls", "http://127.0.0.1:%d" % cp,
                    "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
                    "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp]
            r = subprocess.run(args + ["--initial-cluster", "a=http://127.0.0.1:%d" % other],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--initial-cluster has a=http://127.0.0.1:%d but missing from "
                          "--initial-advertise-peer-urls=http://127.0.0.1:%d" % (other, pp), r.stderr + r.stdout)
            # The same URLs in another order start.
            p = subprocess.Popen(args[:-1] + ["http://127.0.0.1:%d,http://127.0.0.1:%d" % (pp, other),
                                              "--initial-cluster", "a=http://127.0.0.1:%d,a=http://127.0.0.1:%d"
                                              % (other, pp)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                with self.assertRaises(subprocess.TimeoutExpired):
                    p.wait(3)
            finally:
                p.kill()
                p.wait()
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_help_shows_each_flags_default_and_the_offline_restore(self):
        # The defaults shown are the values a member takes when the flag is
        # left out (etcd's --help prints its defaults too); the restore
        # command is its own entry point (`etcdq snapshot restore`).
        r = subprocess.run([harness.binary_under_test(), "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        # "  --name TEXT=default (Env:ETCD_NAME)": the flag, its type, "=", its default.
        shown = dict(re.findall(r"^\s+(--[a-z-]+) [^=\s]*=(\S+)", r.stdout, re.M))
        self.assertEqual(shown.get("--name"), "default", r.stdout)
        self.assertEqual(shown.get("--max-request-bytes"), "1572864", r.stdout)
        self.assertEqual(shown.get("--max-txn-ops"), "128", r.stdout)
        self.assertEqual(shown.get("--snapshot-count"), "8192", r.stdout)
        self.assertEqual(shown.get("--initial-cluster-state"), "new", r.stdout)
        self.assertIn("etcdq snapshot restore", r.stdout)
        restore = subprocess.run([harness.binary_under_test(), "snapshot", "restore", "--help"],
                                 capture_output=True, text=True, timeout=30)
        self.assertEqual(restore.returncode, 0, restore.stderr)
        self.assertIn("--data-dir", restore.stdout + restore.stderr)


if __name__ == "__main__":
    harness.main()
