#!/usr/bin/python3
"""Long operations say how far they are (issue #36 item 7): defragment,
compaction, snapshot save and `etcdq snapshot restore` log their start, their
progress (at most once a second: what is done of how much) and their end with
sizes and how long they took; on a terminal, `etcdq snapshot restore` draws a
progress bar instead of progress lines.

Progress lines come only when an operation runs longer than a second; the
second test sets ETCDQ_PROGRESS_INTERVAL_MS=0 (common/progress.h, a test
knob: a line at every step an operation checks) so that a few hundred
kilobytes show them, and runs the restore in a pseudo-terminal (python's pty).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_long_operation_logs.py
"""
import os
import pty
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


    def test_progress_lines_and_the_restore_bar(self):
        os.environ["ETCDQ_PROGRESS_INTERVAL_MS"] = "0"  # the member and the restore below inherit it
        self.addCleanup(os.environ.pop, "ETCDQ_PROGRESS_INTERVAL_MS", None)
        m = self.new_member()
        kv = m.kv()
        rev = 0
        for v in range(30):  # 1,500 key revisions, every key 30 times
            t = pb.TxnRequest(success=[pb.RequestOp(request_put=pb.PutRequest(key=b"k/%03d" % k, value=b"v" * 200))
                                       for k in range(50)])
            rev = kv.Txn(t, timeout=30).header.revision
        etcdctl = [harness.ETCDCTL, "--endpoints", m.endpoint]
        tmp = tempfile.mkdtemp(prefix="etcdq-longops-")
        snap = os.path.join(tmp, "snap.db")
        p = subprocess.run(etcdctl + ["snapshot", "save", snap], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        text = log_text(m)
        self.assertRegex(text, r"building a database snapshot for a client: at revision \d+ of %d, \d+ key "
                               r"revisions written, \d+ ms" % rev)
        self.assertRegex(text, r"sending database snapshot to client: \d+ of \d+ bytes \(\d+%\), \d+ ms")

        restore = [harness.binary_under_test(), "snapshot", "restore", snap, "--name", "r",
                   "--initial-cluster", "r=http://127.0.0.1:1", "--initial-advertise-peer-urls", "http://127.0.0.1:1"]
        p = subprocess.run(restore + ["--data-dir", os.path.join(tmp, "lines")], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"restoring: \d+ key revisions copied, at revision \d+, \d+ of \d+ bytes read "
                                   r"\(\d+%\), \d+\.\d s")
        self.assertRegex(p.stderr, r"finished restoring snapshot \S+: 1500 key revisions, \d+ bytes in \S+, took "
                                   r"\d+\.\d+ s")
        self.assertNotIn("\r", p.stderr)  # no bar: stderr is not a terminal

        # stderr a terminal: a bar, redrawn in place, full at the end.
        leader, follower = pty.openpty()
        proc = subprocess.Popen(restore + ["--data-dir", os.path.join(tmp, "bar")], stdout=subprocess.PIPE,
                                stderr=follower, stdin=subprocess.DEVNULL)
        os.close(follower)
        got = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            got += chunk
        os.close(leader)
        out, _ = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, got)
        screen = got.decode(errors="replace")
        self.assertIn("\rrestoring [" + "-" * 30 + "]   0%", screen)
        self.assertIn("\rrestoring [" + "#" * 30 + "] 100%  1500 key revisions", screen)
        self.assertNotIn("restoring: ", screen)  # the bar, not the lines
        self.assertRegex(out.decode(), r"restored snapshot .* \(\d+\.\d+ s\)")

        # Compaction and defragmentation, of what the snapshot above held.
        kv.Compact(pb.CompactionRequest(revision=rev - 1, physical=True), timeout=60)
        text = log_text(m)
        self.assertRegex(text, r"compaction to revision %d: at revision \d+ \(\d+%% of revisions \d+\.\.%d\), "
                               r"\d+ changes swept, \d+ versions removed, \d+ ms" % (rev - 1, rev - 1))

        p = subprocess.run(etcdctl + ["defrag"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        text = log_text(m)
        self.assertRegex(text, r"defragmenting \S+: \d+ of \d+ bytes done \(\d+ of \d+ column families; "
                               r"compacting \S+\), \d+ ms")
        self.assertRegex(text, r"finished defragmenting \S+: \d+ bytes before, \d+ after, took \d+ ms")


if __name__ == "__main__":
    harness.main()
