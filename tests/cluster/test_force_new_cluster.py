#!/usr/bin/python3
"""--force-new-cluster, etcd's disaster recovery: a 3-member cluster takes
writes, every member is killed, and one of them is started alone with
--force-new-cluster. It serves every key the cluster had acknowledged, lists
itself as the only member (same member id, same cluster id), takes writes
as a one-member cluster, and stays one after a restart without the flag.
(etcd rewrites its membership to itself the same way; etcdq appends a Raft
configuration of this member alone to its log, consensus/node.h.)

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_force_new_cluster.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd3.etcdrpc import rpc_pb2  # noqa: E402

from cluster import ClusterTestCase, main  # noqa: E402
from harness import all_keys_request  # noqa: E402


class ForceNewCluster(ClusterTestCase):
    def test_one_member_restarted_with_force_new_cluster_keeps_the_data_and_takes_writes(self):
        c = self.new_cluster(3)
        leader = c.leader_index()
        kv = c.kv(leader)
        for i in range(200):
            kv.Put(rpc_pb2.PutRequest(key=b"k%03d" % i, value=b"v%d" % i), timeout=10)
        revision = kv.Range(rpc_pb2.RangeRequest(key=b"k000"), timeout=10).header.revision
        c.wait_applied_revision(revision)
        survivor = (leader + 1) % 3   # a follower: any member's data will do once all applied
        before = c.status(survivor)
        member_id, cluster_id = before.header.member_id, before.header.cluster_id

        c.kill9(0, 1, 2)
        c[survivor].restart(extra_args=["--force-new-cluster"])

        st = c.status(survivor)
        self.assertEqual(st.header.member_id, member_id)
        self.assertEqual(st.header.cluster_id, cluster_id)
        self.assertEqual(st.leader, member_id)
        members = c.member_list(via=survivor).members
        self.assertEqual([m.ID for m in members], [member_id])
        got = c.kv(survivor).Range(all_keys_request(), timeout=10)
        self.assertEqual(len(got.kvs), 200)
        self.assertEqual(got.header.revision, revision)
        resp = c.kv(survivor).Put(rpc_pb2.PutRequest(key=b"after", value=b"recovery"), timeout=10)
        self.assertEqual(resp.header.revision, revision + 1)

        # Still a one-member cluster after a restart without the flag.
        c._drop_stubs(survivor)
        c[survivor].restart(extra_args=[])
        self.assertEqual([m.ID for m in c.member_list(via=survivor).members], [member_id])
        got = c.kv(survivor).Range(all_keys_request(), timeout=10)
        self.assertEqual(len(got.kvs), 201)
        c.kv(survivor).Put(rpc_pb2.PutRequest(key=b"after2", value=b"x"), timeout=10)


if __name__ == "__main__":
    main()
