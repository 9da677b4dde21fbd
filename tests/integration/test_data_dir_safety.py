#!/usr/bin/python3
"""A member's data dir across restarts: damage it and the member must refuse
to start with a message naming what is wrong (never serve a state its log
cannot reproduce); move the member to another peer port and it keeps its
identity and data, as etcd does."""
import glob
import os
import shutil
import subprocess
import time

import harness
from etcd3.etcdrpc import rpc_pb2


class DataDirSafety(harness.MemberTestCase):
    def fill(self, m, n=200):
        c = m.client()
        for i in range(n):
            c.put("k%04d" % i, "v%d" % i)
        return c

    def test_member_with_damaged_raft_log_refuses_to_start_and_says_why(self):
        if harness.is_reference_etcd():
            self.skipTest("etcd's WAL has its own layout")
        m = self.new_member()
        self.fill(m)
        m.stop()
        shutil.rmtree(os.path.join(m.data_dir, "member", "raft"))
        proc = subprocess.run(m.args(), capture_output=True, text=True, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("the Raft log in", proc.stderr)
        self.assertIn("state database has applied index", proc.stderr)

    def test_member_restarted_on_another_peer_port_keeps_id_and_data(self):
        m = self.new_member()
        c = self.fill(m, 20)
        before = m.maintenance().Status(rpc_pb2.StatusRequest(), timeout=5)
        m.stop()
        m.peer_port = harness.free_port()
        m.peer_url = "http://127.0.0.1:%d" % m.peer_port
        start = time.monotonic()
        m.start()
        self.assertLess(time.monotonic() - start, 15)
        after = m.maintenance().Status(rpc_pb2.StatusRequest(), timeout=5)
        self.assertEqual(after.header.member_id, before.header.member_id)
        self.assertEqual(after.header.cluster_id, before.header.cluster_id)
        c = m.client()
        self.assertEqual(c.get("k0019")[0], b"v19")
        c.put("after", "1")
        self.assertEqual(c.get("after")[0], b"1")


if __name__ == "__main__":
    harness.main()
