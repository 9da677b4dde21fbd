"""The ClickHouse sink (QUEUES.md): a `ch:{table}` queue inserts its JSON
messages into ClickHouse, each row with its queue and idx, exactly once also
across a ClickHouse outage; a non-JSON message goes to the dead-letter queue;
a ClickHouse that does not answer at start is one log line.

Starts Debian's clickhouse-server (installed by scripts/setup.sh) with
scripts/clickhouse.sh on free loopback ports, as the README does;
etcdq-only (etcd has no queues). Killing the leader between ClickHouse's
acceptance and the delete: tests/cluster/test_queue_clickhouse_exactly_once.py."""
import json
import os
import re
import subprocess
import time
import unittest

import harness
from clickhouselib import EVENTS_DDL, REPO, ClickHouse, wait_for


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class ClickHouseSinkTest(harness.MemberTestCase):
    def log_text(self, thing):
        if isinstance(thing, ClickHouse):
            return "clickhouse log\n" + thing.log_tail()
        return super().log_text(thing)

    def wait_for(self, what, fn, timeout=60):
        return wait_for(self, what, fn, timeout, step=0.2)

    def rows(self, ch):
        out = ch.query("SELECT count(), uniqExact(id) FROM default.events").split()
        return int(out[0]), int(out[1])

    def log(self, m):
        with open(m.log_path, errors="replace") as f:
            return f.read()

    def depth(self, c, queue):
        return sum(1 for _ in c.get_prefix("/q/%s/0" % queue))

    def test_rows_arrive_once_across_an_outage(self):
        ch = self.track(ClickHouse())
        ch.start()
        ch.sql(EVENTS_DDL)
        m = self.new_member(["--clickhouse-url", ch.url])
        c = m.client()

        for i in range(1000):
            c.put("/q/ch:events/p/row%d" % i, json.dumps({"id": i, "name": "n%d" % i}))
        self.wait_for("1000 rows in ClickHouse", lambda: self.rows(ch) == (1000, 1000))
        self.wait_for("the queue to empty", lambda: self.depth(c, "ch:events") == 0)

        # ClickHouse goes away mid-stream: messages stay queued.
        for i in range(1000, 1250):
            c.put("/q/ch:events/p/row%d" % i, json.dumps({"id": i, "name": "n%d" % i}))
        ch.stop()
        for i in range(1250, 1500):
            c.put("/q/ch:events/p/row%d" % i, json.dumps({"id": i, "name": "n%d" % i}))
        time.sleep(2)
        self.assertGreater(self.depth(c, "ch:events"), 0, "messages were removed while ClickHouse was down")

        ch.start()
        self.wait_for("1500 rows in ClickHouse", lambda: self.rows(ch) == (1500, 1500), timeout=90)
        self.wait_for("the queue to empty", lambda: self.depth(c, "ch:events") == 0)
        time.sleep(1)
        self.assertEqual(self.rows(ch), (1500, 1500), "a row arrived twice")
        # Each row names its queue and idx: produced one at a time, row{i} got idx i+1.
        got = ch.query("SELECT etcdq_queue, etcdq_idx, id FROM default.events ORDER BY etcdq_idx FORMAT TabSeparated")
        self.assertEqual(got.splitlines(), ["ch:events\t%d\t%d" % (i + 1, i) for i in range(1500)])
        log = self.log(m)
        self.assertEqual(log.count("does not answer"), 1, log[-3000:])
        self.assertEqual(log.count("answers again"), 1, log[-3000:])

    def test_non_json_goes_to_the_dead_letter_queue(self):
        ch = self.track(ClickHouse())
        ch.start()
        ch.sql(EVENTS_DDL)
        m = self.new_member(["--clickhouse-url", ch.url])
        c = m.client()
        c.put("/q/ch:events/p/good1", json.dumps({"id": 1, "name": "a"}))
        c.put("/q/ch:events/p/bad", "this is not json")
        c.put("/q/ch:events/p/list", "[1, 2]")
        c.put("/q/ch:events/p/clash", json.dumps({"id": 3, "etcdq_idx": 7}))
        # JSON allows a name twice; ClickHouse refuses the whole batch for it
        # ("Duplicate field found"), which held back the rows before it too.
        c.put("/q/ch:events/p/twice", '{"id": 4, "name": "a", "name": "b"}')
        c.put("/q/ch:events/p/good2", json.dumps({"id": 2, "name": "b"}))
        self.wait_for("2 rows", lambda: self.rows(ch) == (2, 2))
        dead = self.wait_for("4 dead letters", lambda: [v.partition(b"\n") for v, _ in c.get_prefix("/q/ch:events.dlq/")]
                             if len(list(c.get_prefix("/q/ch:events.dlq/"))) == 4 else None)
        # Each: a JSON line about it, then the payload as produced.
        self.assertEqual(sorted(payload for _h, _n, payload in dead),
                         [b"[1, 2]", b"this is not json", b'{"id": 3, "etcdq_idx": 7}',
                          b'{"id": 4, "name": "a", "name": "b"}'])
        reasons = {payload: json.loads(head)["reason"] for head, _n, payload in dead}
        self.assertIn("etcdq_idx", reasons[b'{"id": 3, "etcdq_idx": 7}'])
        self.assertIn("twice", reasons[b'{"id": 4, "name": "a", "name": "b"}'])
        for p in (b"[1, 2]", b"this is not json"):
            self.assertIn("JSON", reasons[p])
        self.assertEqual(ch.query("SELECT etcdq_idx, id FROM default.events ORDER BY id FORMAT TabSeparated"),
                         "1\t1\n6\t2\n")
        self.assertEqual(self.depth(c, "ch:events"), 0)

    def test_clickhouse_silent_at_start_is_one_log_line(self):
        ch = self.track(ClickHouse())  # its ports are chosen; it is not started yet
        m = self.new_member(["--clickhouse-url", ch.url])
        c = m.client()
        for i in range(20):
            c.put("/q/ch:events/p/r%d" % i, json.dumps({"id": i, "name": "n"}))
        time.sleep(4)  # several retries (backoff 0.2 s doubling)
        log = self.log(m)
        lines = [ln for ln in log.splitlines() if "ClickHouse" in ln]
        self.assertEqual(len(lines), 1, "\n".join(lines))
        self.assertIn("ClickHouse at %s does not answer" % ch.url, lines[0])
        self.assertIn("--clickhouse-url", lines[0])
        self.assertEqual(self.depth(c, "ch:events"), 20)

        ch.start()
        ch.sql(EVENTS_DDL)
        self.wait_for("20 rows", lambda: self.rows(ch) == (20, 20), timeout=60)
        self.wait_for("the queue to empty", lambda: self.depth(c, "ch:events") == 0)
        log = self.log(m)
        self.assertEqual(log.count("does not answer"), 1, log[-3000:])
        self.assertIn("ClickHouse at %s answers again" % ch.url, log)

    def test_a_refused_batch_is_one_json_log_line(self):
        # ClickHouse's error text has newlines and quotes of its own; the
        # warning that quotes it is still one line of JSON (common/log_line.h).
        ch = self.track(ClickHouse())
        ch.start()
        ch.sql(EVENTS_DDL)
        m = self.new_member(["--clickhouse-url", ch.url])
        c = m.client()
        c.put("/q/ch:events/p/a", json.dumps({"id": "not a number"}))
        lines = self.wait_for("the refusal", lambda: [l for l in self.log(m).splitlines()
                                                      if "did not take a batch" in l])
        self.assertEqual(len(lines), 1, self.log(m)[-3000:])
        entry = json.loads(lines[0])
        self.assertEqual(entry["level"], "warn")
        self.assertIn("\n", entry["msg"])
        self.assertTrue(entry["msg"].endswith("the messages stay queued and are retried"), entry["msg"])
        for line in self.log(m).splitlines():
            if line.startswith("{"):
                json.loads(line)
        self.assertEqual(self.depth(c, "ch:events"), 1)

    def test_table_without_the_queue_columns_is_explained(self):
        ch = self.track(ClickHouse())
        ch.start()
        ch.sql("CREATE TABLE events (id UInt64) ENGINE = MergeTree ORDER BY id")
        m = self.new_member(["--clickhouse-url", ch.url])
        c = m.client()
        c.put("/q/ch:events/p/a", json.dumps({"id": 1}))
        self.wait_for("the log to say why", lambda: "needs the columns etcdq_queue String and etcdq_idx UInt64"
                      in self.log(m))
        self.assertEqual(self.depth(c, "ch:events"), 1)

    def test_two_queues_into_one_table_each_ask_for_their_own_idx(self):
        # Two ch: queues whose tables are Buffers in front of one table: each
        # reads the other's rows too, and only the queue column tells whose
        # highest idx is whose.
        ch = self.track(ClickHouse())
        ch.start()
        ch.sql(EVENTS_DDL)
        for t in ("events_a", "events_b"):
            ch.sql("CREATE TABLE %s AS events ENGINE = Buffer(default, events, 1, 0, 1, 1, 1000000, 1, 100000000)" % t)
        m = self.new_member(["--clickhouse-url", ch.url])
        c = m.client()
        for i in range(10):
            c.put("/q/ch:events_a/p/a%d" % i, json.dumps({"id": i, "name": "a"}))
        self.wait_for("queue a's rows", lambda: self.rows(ch) == (10, 10))
        # Queue b's first messages (idx 1 to 3, as a's first ones) wait while
        # ClickHouse is away: the leader learns nothing about b before it is back.
        ch.stop()
        for i in range(10, 13):
            c.put("/q/ch:events_b/p/b%d" % i, json.dumps({"id": i, "name": "b"}))
        time.sleep(1)
        ch.start()
        self.wait_for("queue b's rows", lambda: self.rows(ch) == (13, 13))
        self.wait_for("queue b to empty", lambda: self.depth(c, "ch:events_b") == 0)
        got = ch.query("SELECT etcdq_queue, etcdq_idx, name FROM events ORDER BY etcdq_queue, etcdq_idx "
                       "FORMAT TabSeparated").splitlines()
        self.assertEqual(got, ["ch:events_a\t%d\ta" % i for i in range(1, 11)] +
                         ["ch:events_b\t%d\tb" % i for i in range(1, 4)])

    def test_readme_example_as_written(self):
        with open(os.path.join(REPO, "README.md")) as f:
            readme = f.read()
        section = readme[readme.index("### Queues into ClickHouse"):]
        start = section.index("```sh\n") + 6
        block = section[start:section.index("\n```", start)]
        ddl = re.search(r'sql ch "(CREATE TABLE .*?)"', block, re.S).group(1)
        self.assertEqual(" ".join(ddl.split()), EVENTS_DDL)
        produce = [ln for ln in block.splitlines() if ln.startswith("etcdctl put ")]
        shown = [ln[2:] for ln in block.splitlines() if ln.startswith("# ch:events")]
        self.assertEqual((len(produce), len(shown)), (1, 1), block)
        ch = self.track(ClickHouse())
        ch.start()  # the README's `start ch`, on free ports
        ch.sql(ddl)
        m = self.new_member(["--clickhouse-url", ch.url])
        env = dict(os.environ, ETCDCTL_API="3", ETCDCTL_ENDPOINTS=m.endpoint,
                   PATH=os.path.dirname(harness.ETCDCTL) + ":" + os.environ.get("PATH", ""))
        p = subprocess.run(["bash", "-c", produce[0]], env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "OK"), p.stderr)
        self.wait_for("the README's row", lambda: ch.sql("SELECT * FROM events").rstrip("\n") == shown[0])

    def test_not_set_up_keeps_messages_and_says_so_once(self):
        m = self.new_member([])
        c = m.client()
        for i in range(5):
            c.put("/q/ch:events/p/r%d" % i, json.dumps({"id": i}))
        time.sleep(1.5)
        self.assertEqual(self.depth(c, "ch:events"), 5)
        with open(m.log_path, errors="replace") as f:
            log = f.read()
        self.assertEqual(log.count("no --clickhouse-url"), 1, log[-2000:])


if __name__ == "__main__":
    harness.main()
