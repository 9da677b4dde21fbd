#!/usr/bin/python3
"""etcdctl's lock and elect commands (clientv3's concurrency recipes over KV,
lease and watch) against the real binary."""
import os
import subprocess
import tempfile
import time

import harness


class EtcdctlLockElect(harness.MemberTestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = cls.new_class_member()

    def ctl(self, *args, **kw):
        return subprocess.Popen([harness.ETCDCTL, "--endpoints", self.m.endpoint] + list(args),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, ETCDCTL_API="3"), **kw)

    def test_second_lock_holder_waits_until_the_first_command_exits(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "log")
            # Each holder appends start/end marks around a sleep; the marks must not interleave.
            script = "echo start-$0 >> %s; sleep 1.5; echo end-$0 >> %s" % (log, log)
            a = self.ctl("lock", "job", "--", "sh", "-c", script, "A")
            time.sleep(0.5)
            b = self.ctl("lock", "job", "--", "sh", "-c", script, "B")
            for p in (a, b):
                out, err = p.communicate(timeout=20)
                self.assertEqual(p.returncode, 0, err)
            marks = open(log).read().split()
        self.assertEqual(marks, ["start-A", "end-A", "start-B", "end-B"])

    def test_elect_makes_one_leader_and_listen_sees_it_and_the_next(self):
        listen = self.ctl("elect", "--listen", "office")
        alice = self.ctl("elect", "office", "alice")
        time.sleep(1.0)
        bob = self.ctl("elect", "office", "bob")
        time.sleep(1.0)
        self.assertIsNone(bob.poll(), "bob's campaign ended while alice led")
        alice.terminate()  # etcdctl resigns on SIGTERM
        alice.communicate(timeout=10)
        time.sleep(1.5)  # bob wins and prints its key and value
        bob.terminate()
        out_b, _ = bob.communicate(timeout=10)
        listen.terminate()
        out_l, _ = listen.communicate(timeout=10)
        self.assertIn("bob", out_b.split(), "bob never became the leader")
        values = [line for line in out_l.splitlines() if line in ("alice", "bob")]
        self.assertEqual(values[:1], ["alice"])
        self.assertIn("bob", values)


if __name__ == "__main__":
    harness.main()
