#!/usr/bin/python3
"""--auto-compaction-mode / --auto-compaction-retention as etcd 3.6
(src/member/auto_compaction.h): with a periodic retention of 2 s the member
compacts by itself, first to the revision of 2 s after start, then every
2 s to the revision of about 2 s earlier, and a Range at an older revision
gets etcd's "required revision has been compacted"; bad modes and
retentions are refused at start, in etcd 3.6's words (its zap lines, read
by harness.refusal_text). Every expectation holds for etcd 3.6 too (the
default binary).

Revision mode checks every 5 minutes (etcd's fixed revInterval), so its
end-to-end test runs only with AUTO_COMPACTION_SLOW=1; the schedule itself is
unit-tested (tests/unit/auto_compaction_test.cc).

    /usr/bin/python3 tests/integration/test_auto_compaction.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_auto_compaction.py
"""
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

COMPACTED = "etcdserver: mvcc: required revision has been compacted"


class AutoCompactionTest(harness.MemberTestCase):

    def range_at(self, kv, rev):
        return kv.Range(pb.RangeRequest(key=b"k", revision=rev), timeout=5)

    def compacted_at(self, kv, rev):
        try:
            self.range_at(kv, rev)
            return False
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.OUT_OF_RANGE, e.details())
            self.assertEqual(e.details(), COMPACTED)
            return True

    def test_periodic_retention_of_two_seconds_compacts_old_revisions(self):
        m = self.new_member(extra_args=["--auto-compaction-mode=periodic", "--auto-compaction-retention=2s"])
        kv = m.kv()
        t0 = time.monotonic()
        first = kv.Put(pb.PutRequest(key=b"k", value=b"v0"), timeout=5).header.revision
        self.assertEqual(self.range_at(kv, first).kvs[0].value, b"v0")
        # Keep writing: every compaction then has a newer revision to go to.
        deadline = t0 + 20
        i = 0
        while not self.compacted_at(kv, first):
            self.assertLess(time.monotonic(), deadline, "revision %d still readable after 20 s" % first)
            i += 1
            kv.Put(pb.PutRequest(key=b"k", value=b"v%d" % i), timeout=5)
            time.sleep(0.1)
        took = time.monotonic() - t0
        # Not before one retention (2 s) has passed since the member started.
        self.assertGreater(took, 1.5)
        # The newest revision stays readable, and the compaction follows the
        # writes: a revision written now is compacted a few seconds later.
        now_rev = kv.Put(pb.PutRequest(key=b"k", value=b"later"), timeout=5).header.revision
        self.assertEqual(self.range_at(kv, now_rev).kvs[0].value, b"later")
        deadline = time.monotonic() + 15
        while not self.compacted_at(kv, now_rev):
            self.assertLess(time.monotonic(), deadline, "revision %d never compacted" % now_rev)
            kv.Put(pb.PutRequest(key=b"k", value=b"more"), timeout=5)
            time.sleep(0.2)
        if not harness.is_reference_etcd():
            with open(m.log_path) as f:
                self.assertIn("Starting auto-compaction at revision", f.read())

    def test_no_retention_means_no_auto_compaction(self):
        m = self.new_member(extra_args=["--auto-compaction-mode=periodic"])
        kv = m.kv()
        first = kv.Put(pb.PutRequest(key=b"k", value=b"v0"), timeout=5).header.revision
        for i in range(20):
            kv.Put(pb.PutRequest(key=b"k", value=b"v%d" % i), timeout=5)
            time.sleep(0.2)
        self.assertEqual(self.range_at(kv, first).kvs[0].value, b"v0")

    def test_bad_mode_or_retention_is_refused_at_start(self):
        for args, words in ((["--auto-compaction-mode=weird", "--auto-compaction-retention=1"],
                             'unknown auto-compaction-mode "weird"'),
                            (["--auto-compaction-retention=abc"], 'time: invalid duration "abc"'),
                            # Not a whole number of hours >= 0, so a Go duration: Go's words.
                            (["--auto-compaction-retention=-1"],
                             'error parsing CompactionRetention: time: missing unit in duration "-1"')):
            with self.subTest(args=args):
                m = self.track(harness.Member(start=False, extra_args=args))
                try:
                    p = subprocess.run(m.args(), capture_output=True, text=True, timeout=15,
                                       stdin=subprocess.DEVNULL)
                except subprocess.TimeoutExpired:
                    self.fail("%s: still running after 15 s" % args)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(words, harness.refusal_text(p.stdout + p.stderr))

    @unittest.skipUnless(os.environ.get("AUTO_COMPACTION_SLOW"), "takes 5 minutes (etcd checks every 5 minutes)")
    def test_revision_mode_keeps_the_last_n_revisions(self):
        m = self.new_member(extra_args=["--auto-compaction-mode=revision", "--auto-compaction-retention=10"])
        kv = m.kv()
        for i in range(30):
            last = kv.Put(pb.PutRequest(key=b"k", value=b"v%d" % i), timeout=5).header.revision
        deadline = time.monotonic() + 330
        while not self.compacted_at(kv, last - 11):
            self.assertLess(time.monotonic(), deadline, "no compaction within 5.5 minutes")
            time.sleep(5)
        # Compacted to current - 10: that revision itself is still readable.
        self.assertEqual(len(self.range_at(kv, last - 10).kvs), 1)


if __name__ == "__main__":
    harness.main()
