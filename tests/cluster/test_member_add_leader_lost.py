#!/usr/bin/python3
"""A voter added with MemberAdd whose leader is SIGKILLed before the new member started:
once the member starts it catches up and serves under whichever member leads then, as
with etcd (MemberAdd answered means the member is in the cluster, MemberList lists it as
a voter). etcdq adds a voter as a libraft spare that the leader promotes once it caught up
(consensus/promotions.h); a leader that took over must promote it too.

    /usr/bin/python3 tests/cluster/test_member_add_leader_lost.py
    ETCDQ_BIN=~/.cache/etcdq/etcd-v3.6.17-*/etcd /usr/bin/python3 tests/cluster/test_member_add_leader_lost.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, main, rpc_pb2  # noqa: E402

SERVE_TIMEOUT_S = 20


class MemberAddLeaderLostTest(ClusterTestCase):

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


if __name__ == "__main__":
    main()
