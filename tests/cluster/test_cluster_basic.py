#!/usr/bin/python3
"""A freshly bootstrapped 3-member cluster describes itself the way etcd does:
etcdctl's member list, endpoint status and endpoint health over --cluster, and
the member_id/cluster_id in every response header.

    /usr/bin/python3 tests/cluster/test_cluster_basic.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_cluster_basic.py
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, main, rpc_pb2  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500


class ClusterBasicTest(ClusterTestCase):

    @classmethod
    def setUpClass(cls):
        # One cluster for these checks: none of them changes membership or leadership.
        cls.c = cls.new_class_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)

    def test_member_list_shows_every_member_with_its_name_and_urls(self):
        c = self.c
        out = c.etcdctl_json("member", "list")
        members = out["members"]
        self.assertEqual(len(members), 3, out)
        by_name = {m.get("name", ""): m for m in members}
        self.assertEqual(sorted(by_name), ["m0", "m1", "m2"], out)
        for m in c.members:
            got = by_name[m.name]
            self.assertEqual(got.get("peerURLs"), [m.peer_url], got)
            self.assertEqual(got.get("clientURLs"), [m.client_url], got)
            self.assertFalse(got.get("isLearner", False), got)
        ids = [m["ID"] for m in members]
        self.assertEqual(len(set(ids)), 3, ids)
        self.assertNotIn(0, ids)
        # Every member answers MemberList with the same set.
        for i in range(3):
            got = sorted((m.ID, m.name) for m in c.member_list(via=i).members)
            self.assertEqual(got, sorted((m["ID"], m.get("name", "")) for m in members), "via m%d" % i)

    def test_member_list_is_sorted_by_member_id_on_every_member(self):
        # etcd lists members by id (membership.RaftCluster.Members sorts
        # MembersByID), whatever order --initial-cluster named them in:
        # `etcdctl member list | head -1` and diffs of its output rely on it.
        c = self.c
        table = c.etcdctl("member", "list").strip().splitlines()
        self.assertEqual(len(table), 3, table)
        ids = [int(line.split(",")[0], 16) for line in table]
        self.assertEqual(ids, sorted(ids), table)
        for i in range(3):
            got = [m.ID for m in c.member_list(via=i).members]
            self.assertEqual(got, ids, "MemberList via m%d" % i)
            one = c.etcdctl("member", "list", endpoints=c.members[i].client_url).strip().splitlines()
            self.assertEqual(one, table, "etcdctl member list via m%d" % i)

    def test_endpoint_status_cluster_agrees_on_cluster_leader_and_term(self):
        c = self.c
        # A spurious election on a busy machine may land between two members' answers: retry a little.
        for attempt in range(3):
            out = c.etcdctl_json("endpoint", "status", "--cluster")
            self.assertEqual(len(out), 3, out)
            sts = [e["Status"] for e in out]
            terms = {s["raftTerm"] for s in sts} | {s["header"]["raft_term"] for s in sts}
            leaders = {s["leader"] for s in sts}
            if len(terms) == 1 and len(leaders) == 1:
                break
        self.assertEqual(sorted(e["Endpoint"] for e in out), sorted(m.client_url for m in c.members))
        self.assertEqual(len({s["header"]["cluster_id"] for s in sts}), 1, out)
        self.assertEqual(len(terms), 1, out)
        self.assertEqual(len(leaders), 1, out)
        self_leaders = [s for s in sts if s["leader"] == s["header"]["member_id"]]
        self.assertEqual(len(self_leaders), 1, "exactly one member must say it is the leader: %s" % out)
        self.assertEqual(len({s["header"]["member_id"] for s in sts}), 3, out)
        for s in sts:
            self.assertGreater(s["raftIndex"], 0, s)
            self.assertFalse(s.get("isLearner", False), s)
            self.assertTrue(s["version"], s)

    def test_endpoint_health_cluster_reports_every_member_healthy(self):
        c = self.c
        out = c.etcdctl_json("endpoint", "health", "--cluster")
        self.assertEqual(sorted(e["endpoint"] for e in out), sorted(m.client_url for m in c.members), out)
        for e in out:
            self.assertTrue(e["health"], e)
        text = c.etcdctl("endpoint", "health", "--cluster", check=False)
        self.assertEqual(text.returncode, 0, text.stderr)

    def test_response_headers_carry_each_members_own_id_and_one_cluster_id(self):
        c = self.c
        listed = {m["peerURLs"][0]: m["ID"] for m in c.etcdctl_json("member", "list")["members"]}
        cluster_ids = set()
        for i, m in enumerate(c.members):
            r = c.kv(i).Range(rpc_pb2.RangeRequest(key=b"basic/none"), timeout=5)
            self.assertEqual(r.header.member_id, listed[m.peer_url], m)
            st = c.status(i, timeout=5)
            self.assertEqual(st.header.member_id, listed[m.peer_url], m)
            cluster_ids |= {r.header.cluster_id, st.header.cluster_id}
        self.assertEqual(len(cluster_ids), 1, cluster_ids)

    def test_a_write_on_one_member_is_read_on_every_member(self):
        c = self.c
        clients = [c.client(i) for i in range(3)]
        for i, cl in enumerate(clients):
            cl.put("basic/from-m%d" % i, "v%d" % i)
        for j, cl in enumerate(clients):
            for i in range(3):
                value, meta = cl.get("basic/from-m%d" % i)
                self.assertEqual(value, b"v%d" % i, "written via m%d, read via m%d" % (i, j))
        # python-etcd3 sees the same membership.
        names = sorted(m.name for m in clients[0].members)
        self.assertEqual(names, ["m0", "m1", "m2"])

    def test_a_put_through_either_follower_is_answered_without_waiting_for_a_heartbeat(self):
        # A follower answers a forwarded put once it applies it, and hears of
        # the commit from the leader's empty append sent at once. The
        # follower that was still writing the entry when that append came
        # must apply it once written (libraft patch 10): without that, one
        # follower's puts waited for the next heartbeat (50-100 ms here) in
        # bursts, as a synchronous client on a follower saw in issue #37.
        c = self.c
        leader = c.leader_index()
        slow = {}
        for i in (j for j in range(3) if j != leader):
            kv = c.kv(i)
            kv.Put(rpc_pb2.PutRequest(key=b"basic/fwd", value=b"warm"), timeout=5)
            times = []
            for n in range(200):
                t0 = time.perf_counter()
                kv.Put(rpc_pb2.PutRequest(key=b"basic/fwd", value=b"%d" % n), timeout=5)
                times.append(time.perf_counter() - t0)
            times.sort()
            slow[i] = sum(1 for t in times if t > 0.045)
            self.note("puts through m%d (leader m%d): p50 %.2f ms, p90 %.2f ms, max %.2f ms, %d of 200 over 45 ms"
                      % (i, leader, times[100] * 1000, times[179] * 1000, times[-1] * 1000, slow[i]))
        # Measured before the patch: 14-29 of the 400 over 45 ms, in bursts
        # on whichever follower wrote last; with it 0 (load average 10).
        self.assertLessEqual(sum(slow.values()), 6, slow)


if __name__ == "__main__":
    main()
