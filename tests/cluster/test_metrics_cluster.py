#!/usr/bin/python3
"""/metrics on every member of a 3-member cluster (src/common/metrics.h):
one member says it leads, all say a leader exists; a put is counted by every
member that applies it (etcd_mvcc_put_total, "seen by this member") and
raises every member's WAL fsync count (followers append too); a leader's
death raises the survivors' leader changes.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_metrics_cluster.py
"""
import os
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


if __name__ == "__main__":
    main()
