"""The ClickHouse sink (QUEUES.md): a `ch:{table}` queue inserts its JSON
messages into ClickHouse, exactly once while etcdq stays up, also across a
ClickHouse outage; a non-JSON message goes to the dead-letter queue.

Starts Debian's clickhouse-server (installed by scripts/setup.sh) on free
loopback ports with its own temp dir; etcdq-only (etcd has no queues)."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import harness

CLICKHOUSE = "/usr/sbin/clickhouse-server"


class ClickHouse:
    """One clickhouse-server on loopback, its data in a temp dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="etcdq-it-clickhouse-")
        self.http_port = harness.free_port()
        self.tcp_port = harness.free_port()
        self.url = "http://127.0.0.1:%d" % self.http_port
        self.config = os.path.join(self.dir, "config.xml")
        d = self.dir
        with open(self.config, "w") as f:
            f.write("""<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>%(d)s/server.log</log><errorlog>%(d)s/error.log</errorlog></logger>
  <http_port>%(http)d</http_port>
  <tcp_port>%(tcp)d</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>%(d)s/data/</path>
  <tmp_path>%(d)s/tmp/</tmp_path>
  <user_files_path>%(d)s/user_files/</user_files_path>
  <format_schema_path>%(d)s/format_schemas/</format_schema_path>
  <users_config>/etc/clickhouse-server/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
</yandex>
""" % {"d": d, "http": self.http_port, "tcp": self.tcp_port})
        self.proc = None

    def start(self, timeout=60):
        self.proc = subprocess.Popen([CLICKHOUSE, "--config-file=" + self.config], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.query("SELECT 1").strip() == "1":
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("clickhouse-server exited: %s" % self.log_tail())
            time.sleep(0.2)
        raise RuntimeError("clickhouse-server did not answer within %d s: %s" % (timeout, self.log_tail()))

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def query(self, sql):
        req = urllib.request.Request(self.url + "/", data=sql.encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read().decode()

    def log_tail(self):
        for name in ("error.log", "server.log"):
            p = os.path.join(self.dir, name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    return f.read()[-3000:]
        return "(no log)"

    def cleanup(self):
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class ClickHouseSinkTest(harness.MemberTestCase):
    def log_text(self, thing):
        if isinstance(thing, ClickHouse):
            return "clickhouse log\n" + thing.log_tail()
        return super().log_text(thing)

    def wait_for(self, what, fn, timeout=60):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = fn()
            if last:
                return last
            time.sleep(0.2)
        self.fail("timed out waiting for %s (last: %r)" % (what, last))

    def rows(self, ch):
        out = ch.query("SELECT count(), uniqExact(id) FROM default.events").split()
        return int(out[0]), int(out[1])

    def depth(self, c, queue):
        return sum(1 for _ in c.get_prefix("/q/%s/0" % queue))

    def test_rows_arrive_once_across_an_outage(self):
        ch = self.track(ClickHouse())
        ch.start()
        ch.query("CREATE TABLE default.events (id UInt64, name String) ENGINE = MergeTree ORDER BY id")
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
        self.assertIn("retried", m.log_tail(200))

    def test_non_json_goes_to_the_dead_letter_queue(self):
        ch = self.track(ClickHouse())
        ch.start()
        ch.query("CREATE TABLE default.events (id UInt64, name String) ENGINE = MergeTree ORDER BY id")
        m = self.new_member(["--clickhouse-url", ch.url])
        c = m.client()
        c.put("/q/ch:events/p/good1", json.dumps({"id": 1, "name": "a"}))
        c.put("/q/ch:events/p/bad", "this is not json")
        c.put("/q/ch:events/p/list", "[1, 2]")
        c.put("/q/ch:events/p/good2", json.dumps({"id": 2, "name": "b"}))
        self.wait_for("2 rows", lambda: self.rows(ch) == (2, 2))
        dead = self.wait_for("2 dead letters", lambda: [v.partition(b"\n") for v, _ in c.get_prefix("/q/ch:events.dlq/")]
                             if len(list(c.get_prefix("/q/ch:events.dlq/"))) == 2 else None)
        # Each: a JSON line about it, then the payload as produced.
        self.assertEqual(sorted(payload for _h, _n, payload in dead), [b"[1, 2]", b"this is not json"])
        for head, _n, _p in dead:
            self.assertIn("JSON", json.loads(head)["reason"])
        self.assertEqual(self.depth(c, "ch:events"), 0)

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
