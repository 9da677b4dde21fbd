#!/usr/bin/python3
"""Member ids as etcd makes them (issue #36 item 3): a member added at run time
gets an id that mixes in the time (etcd's membership.NewMember with `now`), so
a member added again at a removed member's peer URL gets a new id, and a
removed id never comes back; the members of --initial-cluster keep ids derived
from their peer URLs and the cluster token, the same on every member.

    /usr/bin/python3 tests/cluster/test_member_ids.py

Each round: MemberAdd (a learner) at one fixed peer URL, start a member there
on a fresh data dir with --initial-cluster-state existing (it must learn the id
MemberAdd gave, from the cluster), check it serves under that id, MemberRemove
it (it exits by itself), and add again at the same URL.
"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from cluster import (ClusterMember, ClusterTestCase, harness, initial_cluster_like_etcdctl, main,  # noqa: E402
                     rpc_error_text, v35)

REFERENCE = harness.is_reference_etcd()

ROUNDS = 3


class MemberIdsTest(ClusterTestCase):

    def test_member_added_again_at_a_removed_members_url_gets_a_new_id(self):
        c = self.new_cluster(1, heartbeat_ms=50, election_ms=500)
        self.assertEqual(len(c.member_list().members), 1)
        initial_id = c.member_id(0)

        # One peer URL (and client URL) for every round: each round's member
        # is a new process on a new data dir there, as an operator replacing
        # a member on the same host would run it.
        first = ClusterMember(c, "again")
        peer_url, client_url = first.peer_url, first.client_url
        seen, removed = [], []
        for rnd in range(ROUNDS):
            # etcd hashes the time in seconds: within the second of a removal
            # it computes the removed id again and refuses it (membership
            # ErrIDRemoved, answered as "member not found"); a second later
            # it gives a new id. etcdq hashes nanoseconds and never refuses.
            refusals = []
            while True:
                lead = c.leader_index()
                try:
                    add = c.cluster35(lead).MemberAdd(v35.MemberAddRequest(peerURLs=[peer_url], isLearner=True),
                                                      timeout=10)
                    break
                except grpc.RpcError as e:
                    text = rpc_error_text(e)
                    if not REFERENCE or text != "NOT_FOUND: etcdserver: member not found" or len(refusals) > 3:
                        self.fail("round %d: MemberAdd at %s: %s (before: %s)" % (rnd, peer_url, text, refusals))
                    refusals.append(text)
                    time.sleep(0.5)
            if refusals:
                self.note("round %d: refused %d times first: %s" % (rnd, len(refusals), refusals[0]))
            new_id = add.member.ID
            self.note("round %d: MemberAdd at %s gave id %x (removed before: %s)" % (
                rnd, peer_url, new_id, ["%x" % i for i in removed]))
            self.assertNotEqual(new_id, 0)
            self.assertNotEqual(new_id, initial_id)
            self.assertNotIn(new_id, removed, "round %d: a removed id came back" % rnd)
            self.assertNotIn(new_id, seen, "round %d: an id was given twice" % rnd)
            seen.append(new_id)
            ids = {m.ID for m in c.member_list().members}
            self.assertEqual(ids, {initial_id, new_id})

            # The new member, on a fresh data dir, learns its id from the cluster.
            m = first if rnd == 0 else ClusterMember(c, "again")
            m.peer_port, m.peer_url = first.peer_port, peer_url
            m.client_port, m.client_url, m.endpoint = first.client_port, client_url, first.endpoint
            if os.path.exists(m.data_dir):
                shutil.rmtree(m.data_dir)
            m.learner = True
            m.initial_state = "existing"
            m.initial_cluster = initial_cluster_like_etcdctl(add, m.name)
            c.members.append(m)
            i = len(c.members) - 1
            m.start()
            self.assertEqual(m.status(timeout=5).header.member_id, new_id,
                             "round %d: the member serves under another id than MemberAdd gave" % rnd)

            resp, rc, exited = c.remove_member(i)
            self.assertTrue(exited, "round %d: the removed member did not exit by itself" % rnd)
            removed.append(new_id)
            self.assertEqual({mm.ID for mm in resp.members}, {initial_id})

        # The removed ids stay gone: none is listed, and a removed id is
        # refused where a member id is taken.
        self.assertEqual({mm.ID for mm in c.member_list().members}, {initial_id})
        lead = c.leader_index()
        for rid in removed:
            with self.assertRaises(grpc.RpcError) as cm:
                c.cluster35(lead).MemberPromote(v35.MemberPromoteRequest(ID=rid), timeout=5)
            self.assertEqual(rpc_error_text(cm.exception), "NOT_FOUND: etcdserver: member not found")
            with self.assertRaises(grpc.RpcError) as cm:
                c.cluster35(lead).MemberRemove(v35.MemberRemoveRequest(ID=rid), timeout=5)
            self.assertEqual(rpc_error_text(cm.exception), "NOT_FOUND: etcdserver: member not found")

    def test_member_removed_while_down_exits_on_restart_saying_so(self):
        # etcd keeps removed ids for good: a member removed while it was down
        # that restarts on its data dir is told "the member has been
        # permanently removed from the cluster" and exits (etcd 3.6.17:
        # 0.1-0.2 s after the start, measured; status 1 or 0). etcdq waited for a leader
        # forever: the others drop its messages.
        c = self.new_cluster(3, heartbeat_ms=50, election_ms=500)
        if REFERENCE:
            time.sleep(6)   # etcd refuses a removal in the first 5 s ("unhealthy cluster")
        gone = c.member_id(2)
        c.kill9(2)
        lead = c.leader_index()
        resp = c.cluster35(lead).MemberRemove(v35.MemberRemoveRequest(ID=gone), timeout=10)
        self.assertNotIn(gone, [m.ID for m in resp.members])
        m = c[2]
        t0 = time.monotonic()
        m.spawn()
        try:
            rc = m.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.fail("a removed member restarted on its data dir still runs after 15 s")
        took = time.monotonic() - t0
        self.note("removed member restarted: exit %d after %.2f s" % (rc, took))
        if not REFERENCE:
            self.assertNotEqual(rc, 0)   # etcd 3.6 exits 1 or 0 (seen both: 'listener failed' or not)
        with open(m.log_path, errors="replace") as f:
            self.assertIn("the member has been permanently removed from the cluster", f.read())
        m.removed = True
        self.assertEqual({x.ID for x in c.member_list(via=lead).members}, {c.member_id(0), c.member_id(1)})

    def test_initial_members_ids_come_from_urls_and_token(self):
        # Every member of --initial-cluster computes the same ids from the
        # flags; restarting keeps them.
        c = self.new_cluster(3, heartbeat_ms=50, election_ms=500)
        lists = [sorted(m.ID for m in c.member_list(via=i).members) for i in range(3)]
        self.assertEqual(lists[0], lists[1])
        self.assertEqual(lists[0], lists[2])
        own = [c.member_id(i) for i in range(3)]
        self.assertEqual(sorted(own), lists[0])
        c.restart(1)
        self.assertEqual(c[1].status(timeout=5).header.member_id, own[1])


if __name__ == "__main__":
    main()
