#!/usr/bin/python3
"""/metrics on every member of a 3-member cluster (src/common/metrics.h):
one member says it leads, all say a leader exists; a put is counted by every
member that applies it (etcd_mvcc_put_total, "seen by this member") and
raises every member's WAL fsync count (followers append too); a leader's
death raises the survivors' leader changes. The peer network's series: each
member's round trip to the others and the bytes libraft received from them
move, every member knows the three, the leader has a live connection from
each follower, and a member that cannot reach a killed one counts send
failures and a disconnection.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_metrics_cluster.py
"""
import os
import re
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, harness, main, rpc_pb2  # noqa: E402


def scrape(m):
    out = {}
    text = urllib.request.urlopen(m.client_url + "/metrics", timeout=15).read().decode()
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, v = line.rsplit(" ", 1)
            out[name] = float(v)
    return out


def scrape_peers(m, name):
    """{Remote: sample} for `name`{Local=this member, Remote=...}."""
    out = {}
    text = urllib.request.urlopen(m.client_url + "/metrics", timeout=15).read().decode()
    for line in text.splitlines():
        match = re.match(r'^%s\{Local="([^"]*)",Remote="([^"]*)"\} (\S+)$' % re.escape(name), line)
        if match:
            out[match.group(2)] = float(match.group(3))
    return out


def scrape_labelled(m, name):
    """{label value: sample} for the series `name` with one label."""
    out = {}
    text = urllib.request.urlopen(m.client_url + "/metrics", timeout=15).read().decode()
    for line in text.splitlines():
        match = re.match(r'^%s\{\w+="([^"]*)"\} (\S+)$' % re.escape(name), line)
        if match:
            out[match.group(1)] = float(match.group(2))
    return out


@unittest.skipIf(harness.is_reference_etcd(), "etcdq's own check")
class MetricsCluster(ClusterTestCase):
    def test_every_member_counts_what_it_applies(self):
        c = self.new_cluster(3)
        li = c.leader_index()
        before = [scrape(m) for m in c.members]
        self.assertEqual(sum(s["etcd_server_is_leader"] for s in before), 1)
        self.assertEqual(before[li]["etcd_server_is_leader"], 1)
        for s in before:
            self.assertEqual(s["etcd_server_has_leader"], 1)
            self.assertGreaterEqual(s["etcd_server_leader_changes_seen_total"], 1)
        follower = c.members[(li + 1) % 3]
        follower.kv().Put(rpc_pb2.PutRequest(key=b"metrics-cluster", value=b"v"), timeout=10)

        # The put counter moves inside the apply, the applied index as the
        # apply returns: wait for both (a scrape can fall between them).
        def applied_everywhere():
            now = [scrape(m) for m in c.members]
            return all(s["etcd_mvcc_put_total"] >= b["etcd_mvcc_put_total"] + 1 and
                       s["etcd_server_proposals_applied_total"] >= b["etcd_server_proposals_applied_total"] + 1
                       for s, b in zip(now, before))
        deadline = time.time() + 10
        while not applied_everywhere() and time.time() < deadline:
            time.sleep(0.1)
        after = [scrape(m) for m in c.members]
        for b, a in zip(before, after):
            self.assertEqual(a["etcd_mvcc_put_total"] - b["etcd_mvcc_put_total"], 1)
            self.assertGreater(a["etcd_disk_wal_fsync_duration_seconds_count"],
                               b["etcd_disk_wal_fsync_duration_seconds_count"])
            self.assertGreaterEqual(a["etcd_server_proposals_applied_total"],
                                    b["etcd_server_proposals_applied_total"] + 1)

        c.kill9(li)
        survivors = [i for i in range(3) if i != li]
        c.wait_leader(exclude_ids=())
        deadline = time.time() + 20
        while time.time() < deadline:
            now = [scrape(c.members[i]) for i in survivors]
            if all(s["etcd_server_has_leader"] == 1 for s in now):
                break
            time.sleep(0.2)
        for i, s in zip(survivors, now):
            self.assertEqual(s["etcd_server_has_leader"], 1)
            self.assertGreater(s["etcd_server_leader_changes_seen_total"],
                               after[i]["etcd_server_leader_changes_seen_total"])

    def test_peer_network_series(self):
        c = self.new_cluster(3)
        li = c.leader_index()
        ids = ["%x" % c.member_id(i) for i in range(3)]
        rtt = "etcd_network_peer_round_trip_time_seconds_count"
        received = "etcd_network_peer_received_bytes_total"

        # Every member probes the others every 4 s (member/peer_prober.h).
        def probed():
            return all(all(scrape_labelled(c.members[i], rtt).get(ids[j], 0) >= 1 for j in range(3) if j != i)
                       for i in range(3))
        deadline = time.time() + 15
        while not probed() and time.time() < deadline:
            time.sleep(0.5)
        for i in range(3):
            counts = scrape_labelled(c.members[i], rtt)
            self.assertNotIn(ids[i], counts, "a member does not probe itself")
            for j in range(3):
                if j != i:
                    self.assertGreaterEqual(counts.get(ids[j], 0), 1, "member %d's probes of %d" % (i, j))
        # The leader hears from both followers (their answers), each follower
        # from the leader (its heartbeats).
        on_leader = scrape_labelled(c.members[li], received)
        for j in range(3):
            if j != li:
                self.assertGreater(on_leader.get(ids[j], 0), 0)
                self.assertGreater(scrape_labelled(c.members[j], received).get(ids[li], 0), 0)

        # Every member knows all three (itself too, as etcd's transport);
        # the leader has a live connection from each follower.
        for i in range(3):
            self.assertEqual(scrape_peers(c.members[i], "etcd_network_known_peers"), {x: 1 for x in ids})
        active = "etcd_network_active_peers"
        self.assertEqual({r: v for r, v in scrape_peers(c.members[li], active).items()},
                         {ids[j]: 1 for j in range(3) if j != li})

        # A killed follower: the leader's connects to it fail, its connection
        # to the leader ends (inactive, one disconnection).
        f = (li + 1) % 3
        c.kill9(f)
        failures = "etcd_network_peer_sent_failures_total"
        disconnected = "etcd_network_disconnected_peers_total"
        deadline = time.time() + 10
        while time.time() < deadline and (scrape_labelled(c.members[li], failures).get(ids[f], 0) == 0 or
                                          scrape_peers(c.members[li], disconnected).get(ids[f], 0) == 0):
            time.sleep(0.2)
        self.assertGreater(scrape_labelled(c.members[li], failures).get(ids[f], 0), 0)
        self.assertGreaterEqual(scrape_peers(c.members[li], disconnected).get(ids[f], 0), 1)
        self.assertEqual(scrape_peers(c.members[li], active).get(ids[f]), 0)


if __name__ == "__main__":
    main()
