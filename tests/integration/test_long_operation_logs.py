#!/usr/bin/python3
"""Long operations say how far they are (issue #36 item 7): defragment,
compaction, snapshot save and `etcdq snapshot restore` log their start and
their end with sizes and how long they took (progress lines, at most once a
second, come only when one runs longer than a second).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_long_operation_logs.py
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import harness  # noqa: E402


def log_text(m):
    with open(m.log_path, "rb") as f:
        return f.read().decode(errors="replace")


@unittest.skipIf(harness.is_reference_etcd(), "the lines are etcdq's")
class LongOperationLogsTest(harness.MemberTestCase):

    def test_defrag_compaction_snapshot_and_restore_log_start_and_end(self):
        m = self.new_member()
        kv = m.kv()
        rev = 0
        for v in range(20):
            t = pb.TxnRequest(success=[pb.RequestOp(request_put=pb.PutRequest(key=b"k/%03d" % k, value=b"v" * 200))
                                       for k in range(50)])
            rev = kv.Txn(t, timeout=30).header.revision
        kv.Compact(pb.CompactionRequest(revision=rev, physical=True), timeout=60)
        text = log_text(m)
        self.assertRegex(text, r"compaction to revision %d started: history from revision \d+" % rev)
        self.assertRegex(text, r"finished compaction to revision %d: removed \d+ versions \(\d+ changes swept\) "
                               r"in \d+ ms" % rev)

        harness_etcdctl = [harness.ETCDCTL, "--endpoints", m.endpoint]
        p = subprocess.run(harness_etcdctl + ["defrag"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        text = log_text(m)
        self.assertRegex(text, r"defragmenting \S+: \d+ bytes in \d+ column families")
        self.assertRegex(text, r"finished defragmenting \S+: \d+ bytes before, \d+ after, took \d+ ms")

        tmp = tempfile.mkdtemp(prefix="etcdq-longops-")
        snap = os.path.join(tmp, "snap.db")
        p = subprocess.run(harness_etcdctl + ["snapshot", "save", snap], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        text = log_text(m)
        self.assertRegex(text, r"building a database snapshot for a client at revision %d" % rev)
        self.assertRegex(text, r"sent database snapshot to client: \d+ bytes, took \d+ ms")

        target = os.path.join(tmp, "restored")
        p = subprocess.run([harness.binary_under_test(), "snapshot", "restore", snap, "--data-dir", target,
                            "--name", "r", "--initial-cluster", "r=http://127.0.0.1:1",
                            "--initial-advertise-peer-urls", "http://127.0.0.1:1"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"restoring snapshot %s \(\d+ bytes\) into %s" % (re.escape(snap),
                                                                                      re.escape(target)))
        self.assertRegex(p.stdout, r"restored snapshot .* \(\d+\.\d+ s\)")


if __name__ == "__main__":
    harness.main()
