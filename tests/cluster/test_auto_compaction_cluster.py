#!/usr/bin/python3
"""Auto-compaction is the leader's work (src/member/auto_compaction.h, driven
by the leader-duties hook as etcd's compactor by Pause/Resume): in a
3-member cluster with a periodic retention of 2 s, only the leader starts
compactions, every member applies them (an old revision is compacted on all
three), and after the leader is killed the new leader carries on.
Checked against Debian's etcd 3.4 too (the default binary).

    /usr/bin/python3 tests/cluster/test_auto_compaction_cluster.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_auto_compaction_cluster.py
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from cluster import ClusterTestCase, main, rpc_pb2  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500
# etcd 3.4 (zap) and etcdq's line for a compaction a member starts.
STARTED = re.compile(r"starting auto periodic compaction|Starting auto-compaction at revision")


def compaction_starts(member):
    with open(member.log_path, errors="replace") as f:
        return len(STARTED.findall(f.read()))


class AutoCompactionClusterTest(ClusterTestCase):

    def compacted_on(self, c, i, rev):
        try:
            c.kv(i).Range(rpc_pb2.RangeRequest(key=b"k", revision=rev, serializable=True), timeout=5)
            return False
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.OUT_OF_RANGE:
                raise
            return True

    def write_until_compacted(self, c, rev, indexes, timeout=30):
        deadline = time.monotonic() + timeout
        leader = c.leader_index()
        while not all(self.compacted_on(c, i, rev) for i in indexes):
            self.assertLess(time.monotonic(), deadline, "revision %d not compacted on %s" % (rev, indexes))
            try:
                c.kv(leader).Put(rpc_pb2.PutRequest(key=b"k", value=b"x"), timeout=5)
            except grpc.RpcError:
                leader = c.leader_index()
            time.sleep(0.1)

    def test_only_the_leader_compacts_and_a_new_leader_takes_over(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS,
                             extra_args=["--auto-compaction-mode=periodic", "--auto-compaction-retention=2s"])
        leader = c.leader_index()
        first = c.kv(leader).Put(rpc_pb2.PutRequest(key=b"k", value=b"v"), timeout=5).header.revision
        self.write_until_compacted(c, first, [0, 1, 2])
        starts = [compaction_starts(m) for m in c.members]
        self.note("compactions started per member: %s (leader m%d)" % (starts, leader))
        self.assertGreater(starts[leader], 0, starts)
        self.assertEqual(sum(starts) - starts[leader], 0, "a follower started a compaction: %s" % starts)

        c.kill9(leader)
        new = c.wait_leader(exclude_ids=(c.member_id(leader),))
        rest = [i for i in range(3) if i != leader]
        before = compaction_starts(c.members[new])
        rev = c.kv(new).Put(rpc_pb2.PutRequest(key=b"k", value=b"after"), timeout=5).header.revision
        self.write_until_compacted(c, rev, rest)
        self.assertGreater(compaction_starts(c.members[new]), before, "the new leader never compacted")


if __name__ == "__main__":
    main()
