#!/usr/bin/python3
"""Crashes around MemberAdd. A voter added whose leader is SIGKILLed before the new member
started: once the member starts it catches up and serves under whichever member leads
then, as with etcd (MemberAdd answered means the member is in the cluster, MemberList
lists it as a voter). etcdq adds a voter as a libraft spare that the leader promotes once
it caught up (consensus/promotions.h); a leader that took over must promote it too. And a
new member SIGKILLed on its first start after its state database was created but before
its id was stored: it restarts under the id MemberAdd gave it (member/member.cc).

    /usr/bin/python3 tests/cluster/test_member_add_crashes.py
    ETCDQ_BIN=~/.cache/etcdq/etcd-v3.6.17-*/etcd /usr/bin/python3 tests/cluster/test_member_add_crashes.py
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, main, rpc_pb2  # noqa: E402

SERVE_TIMEOUT_S = 20


class MemberAddCrashesTest(ClusterTestCase):

    def test_added_voter_serves_after_its_leader_was_killed(self):
        c = self.new_cluster()
        c.kv(0).Put(rpc_pb2.PutRequest(key=b"before", value=b"1"), timeout=10)
        leader = c.leader_index()
        j = c.add_member(start=False, via=leader)
        c.kill9(leader)
        # Four voters now: the two left need the old leader back for a quorum.
        c.members[leader].spawn()
        c.wait_serving(indexes=[i for i in range(3)])
        c.wait_leader()
        c.members[j].start(timeout=SERVE_TIMEOUT_S)
        r = c.kv(j).Range(rpc_pb2.RangeRequest(key=b"before"), timeout=10)
        self.assertEqual([kv.value for kv in r.kvs], [b"1"])
        # It votes: with it, three of four members make a quorum without another one.
        other = next(i for i in range(3) if i != c.leader_index())
        c.kill9(other)
        c.kv(j).Put(rpc_pb2.PutRequest(key=b"after", value=b"2"), timeout=10)

    def test_member_killed_before_storing_its_id_restarts_under_it(self):
        c = self.new_cluster()
        c.kv(0).Put(rpc_pb2.PutRequest(key=b"before", value=b"1"), timeout=10)
        j = c.add_member(start=False)
        m = c.members[j]
        # What a SIGKILL leaves between creating the state database and storing the id
        # (etcd keeps its backend in member/snap/db: to it this directory is nothing).
        os.makedirs(os.path.join(m.data_dir, "member", "db"))
        m.start(timeout=SERVE_TIMEOUT_S)
        self.assertEqual(m.status().header.member_id, c.last_member_add.member.ID)
        r = c.kv(j).Range(rpc_pb2.RangeRequest(key=b"before"), timeout=10)
        self.assertEqual([kv.value for kv in r.kvs], [b"1"])
        # Restarted, it keeps that id, and whatever cluster id its log names is the
        # cluster's (a joiner once stored a hash of its --initial-cluster as one).
        c.restart(j, timeout=SERVE_TIMEOUT_S)
        st = m.status()
        self.assertEqual(st.header.member_id, c.last_member_add.member.ID)
        cluster_id = c.members[0].status().header.cluster_id
        self.assertEqual(st.header.cluster_id, cluster_id)
        with open(m.log_path, errors="replace") as f:
            named = set(re.findall(r"of cluster ([0-9a-f]+)", f.read()))
        self.assertLessEqual(named, {"%x" % cluster_id}, "log names another cluster id")


if __name__ == "__main__":
    main()
