#!/usr/bin/python3
"""The ClickHouse sink inserts each message exactly once (QUEUES.md, README
"Work queues"): the leader is SIGKILLed again and again exactly between
ClickHouse's acceptance of a batch and the commit of the batch's delete (an
HTTP proxy in front of ClickHouse holds back its answer to the INSERT:
clickhouselib.InsertGate), and the next leader finds the batch in ClickHouse
and deletes it without inserting it again. Then across a snapshot restore:
messages still queued in the backup, which the cluster inserted after the
backup was taken, are not inserted again by the restored member, and what is
produced after the restore (whose idx the old history may have used) arrives
too. At the end every message is in the table exactly once.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_queue_clickhouse_exactly_once.py
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, main  # noqa: E402  (puts tests/integration on sys.path)
import harness  # noqa: E402
from clickhouselib import EVENTS_DDL, ClickHouse, InsertGate, wait_for  # noqa: E402

QUEUE = "ch:events"


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class ClickHouseExactlyOnce(ClusterTestCase):
    def setUp(self):
        self.ch = self.track(ClickHouse())
        self.ch.start()
        self.ch.sql(EVENTS_DDL)
        self.gate = self.track(InsertGate(self.ch.url))
        self.next_id = 0

    def log_text(self, thing):
        if isinstance(thing, ClickHouse):
            return "clickhouse log\n" + thing.log_tail()
        if isinstance(thing, harness.Member):
            return "log of %r\n%s" % (thing, thing.log_tail())
        if isinstance(thing, InsertGate):
            return "insert gate %s: %d inserts taken" % (thing.url, thing.inserts)
        return super().log_text(thing)

    def wait_for(self, what, fn, timeout=60):
        return wait_for(self, what, fn, timeout, step=0.1)

    def produce(self, client, n):
        """n messages in one Txn: applied together, so the sink's next batch holds all of them."""
        ops = []
        for _ in range(n):
            i = self.next_id
            self.next_id += 1
            ops.append(client.transactions.put("/q/%s/p/m%d" % (QUEUE, i), json.dumps({"id": i, "name": "n%d" % i})))
        ok, _ = client.transaction(compare=[], success=ops, failure=[])
        self.assertTrue(ok)

    def rows(self):
        out = self.ch.query("SELECT count(), uniqExact(id), uniqExact(etcdq_queue, etcdq_idx) FROM events").split()
        return tuple(int(x) for x in out)

    def all_in_once(self):
        rows = self.rows()
        self.assertLessEqual(rows[0], self.next_id, "rows arrived twice: %s" % (rows,))
        return rows == (self.next_id,) * 3

    def depth(self, client):
        return sum(1 for _ in client.get_prefix("/q/%s/0" % QUEUE))

    def kill_between_insert_and_delete(self, client, kill):
        """Produces a batch; once ClickHouse has taken it, SIGKILLs the leader (kill() does,
        and returns how to start it again) before it hears so; then starts it again."""
        self.gate.arm()
        self.produce(client, 40)
        self.assertTrue(self.gate.held.wait(30), "no INSERT reached ClickHouse")
        restart = kill()
        self.gate.release.set()
        restart()

    @staticmethod
    def held_lines(members):
        n = 0
        for m in members:
            with open(m.log_path, errors="replace") as f:
                n += f.read().count("ClickHouse already holds")
        return n

    def test_every_message_once_across_leader_kills_and_a_restore(self):
        c = self.new_cluster(3, extra_args=["--clickhouse-url", self.gate.url])
        rounds = 8
        def kill_leader():
            leader = c.wait_leader()
            c.kill9(leader)
            return lambda: c.restart(leader)

        for _ in range(rounds):
            self.kill_between_insert_and_delete(c.client(c.live()[0]), kill_leader)
        client = c.client(c.wait_leader())
        self.wait_for("every row once", self.all_in_once)
        self.wait_for("the queue to empty", lambda: self.depth(client) == 0)
        # Each new leader found the batch its predecessor inserted and did not delete.
        self.assertEqual(self.held_lines(c.members), rounds)
        before_backup = self.next_id

        # A backup taken while messages wait (ClickHouse away), which the
        # cluster then inserts; more follow.
        self.gate.down = True
        self.produce(client, 30)
        time.sleep(0.5)
        self.assertEqual(self.depth(client), 30)
        tmp = self.track_dir()
        snap = os.path.join(tmp, "backup.db")
        c.etcdctl("snapshot", "save", snap, endpoints=c[c.wait_leader()].endpoint)
        self.gate.down = False
        self.produce(client, 30)
        self.wait_for("every row once", self.all_in_once)
        self.wait_for("the queue to empty", lambda: self.depth(client) == 0)
        old_high = int(self.ch.query("SELECT max(etcdq_idx) FROM events"))
        for i in list(c.live()):
            c.stop(i)

        # Restored from the backup: the 30 messages queued then are in
        # ClickHouse already; new ones get idx above any the old history used.
        r = self.track(harness.Member(start=False, name="restored", extra_args=["--clickhouse-url", self.gate.url]))
        p = subprocess.run([harness.binary_under_test(), "snapshot", "restore", snap, "--name", r.name,
                            "--data-dir", r.data_dir, "--initial-cluster", "%s=%s" % (r.name, r.peer_url),
                            "--initial-advertise-peer-urls", r.peer_url], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("30 queued messages in 1 queues", p.stdout)
        r.start()
        rc = r.client()
        self.wait_for("the restored queue to empty", lambda: self.depth(rc) == 0)
        self.assertEqual(self.held_lines([r]), 1)
        self.assertTrue(self.all_in_once(), self.rows())
        def kill_restored():
            r.kill9()
            return r.restart

        for _ in range(2):
            self.kill_between_insert_and_delete(r.client(), kill_restored)
        rc = r.client()
        self.wait_for("every row once", self.all_in_once)
        self.wait_for("the queue to empty", lambda: self.depth(rc) == 0)
        self.assertEqual(self.held_lines([r]), 3)
        new_low = int(self.ch.query("SELECT min(etcdq_idx) FROM events WHERE id >= %d" % (before_backup + 60)))
        self.assertGreater(new_low, old_high)
        self.assertEqual(sorted(int(x) for x in self.ch.query("SELECT id FROM events").split()),
                         list(range(self.next_id)))

    def track_dir(self):
        d = tempfile.mkdtemp(prefix="etcdq-it-chsnap-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        return d


if __name__ == "__main__":
    main()
