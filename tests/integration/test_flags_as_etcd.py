#!/usr/bin/python3
"""Command-line flags behave as etcd's (Go's flag package): a flag given
twice takes its last value, as unit files that append an override expect
(etcdq once refused to start: "At Most 1 required but received 2").

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_flags_as_etcd.py
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def txn_of_puts(endpoint, n):
    body = "\n".join("put k%d v" % i for i in range(n))
    return subprocess.run(["etcdctl", "--endpoints", endpoint, "txn"], input="\n\n" + body + "\n\n",
                          capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"), timeout=30)


class FlagsAsEtcd(harness.MemberTestCase):
    def test_a_flag_given_twice_takes_the_last_value(self):
        m = self.new_member(["--max-txn-ops", "1", "--max-txn-ops", "3"])
        ok = txn_of_puts(m.endpoint, 3)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        refused = txn_of_puts(m.endpoint, 4)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("too many operations in txn request", refused.stderr)


if __name__ == "__main__":
    harness.main()
