"""Per-queue metrics on /metrics (QUEUES.md, "Metrics"): depth, in flight,
produced/delivered/redelivered/acked/dead-lettered totals and the oldest
message's age, served on --listen-client-http-urls; /health and /version
beside them. etcdq-only (etcd has no queues)."""
import re
import time
import unittest
import urllib.request

import harness
import watchlib
from queue_util import wait_until


def scrape(port):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(etcdq_queue_\w+)\{queue="([^"]*)"\} (\S+)$', line)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return text, out


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueMetrics(harness.MemberTestCase):
    def test_counters_follow_produce_deliver_ack_and_dead_letters(self):
        hp = harness.free_port()
        m = self.new_member(["--listen-client-http-urls", "http://127.0.0.1:%d" % hp])
        c = m.client()
        c.put("/q/mq/config", '{"visibility_timeout": 0.3, "max_deliveries": 2}')
        for i in range(3):
            c.put("/q/mq/p/m%d" % i, "v%d" % i)
        time.sleep(0.3)
        _, v = scrape(hp)
        self.assertEqual(v[("etcdq_queue_depth", "mq")], 3)
        self.assertEqual(v[("etcdq_queue_produced_total", "mq")], 3)
        self.assertEqual(v[("etcdq_queue_delivered_total", "mq")], 0)
        self.assertEqual(v[("etcdq_queue_in_flight", "mq")], 0)
        self.assertGreaterEqual(v[("etcdq_queue_oldest_age_seconds", "mq")], 0.2)

        ws = watchlib.WatchStream(watchlib.ready_channel(m))
        self.addCleanup(ws.close)
        ws.create(b"/q/mq/c/worker")
        self.assertTrue(ws.wait_until(lambda s: sum(len(r.events) for _t, r in s.log) >= 3))
        _, v = scrape(hp)
        self.assertEqual(v[("etcdq_queue_delivered_total", "mq")], 3)
        self.assertEqual(v[("etcdq_queue_in_flight", "mq")], 3)

        # Ack one; the other two are never acked: delivered twice, then dead letters.
        c.delete("/q/mq/00000000000000000001/m0")
        ok = wait_until(lambda: scrape(hp)[1].get(("etcdq_queue_dead_lettered_total", "mq")) == 2, 10)
        _, v = scrape(hp)
        self.assertTrue(ok, v)
        self.assertEqual(v[("etcdq_queue_acked_total", "mq")], 1)
        self.assertEqual(v[("etcdq_queue_redelivered_total", "mq")], 2)
        self.assertEqual(v[("etcdq_queue_delivered_total", "mq")], 5)
        self.assertEqual(v[("etcdq_queue_depth", "mq")], 0)
        self.assertEqual(v[("etcdq_queue_in_flight", "mq")], 0)
        self.assertEqual(v[("etcdq_queue_depth", "mq.dlq")], 2)
        self.assertEqual(v[("etcdq_queue_produced_total", "mq.dlq")], 2)

        # Counters are replicated state: a restart shows the same numbers.
        m.kill9()
        m.restart()
        _, after = scrape(hp)
        for name in ("produced_total", "acked_total", "dead_lettered_total", "delivered_total"):
            self.assertEqual(after[("etcdq_queue_" + name, "mq")], v[("etcdq_queue_" + name, "mq")], name)

    def test_in_flight_drops_when_the_consumer_goes(self):
        """A consumer whose watch ended holds nothing in flight, though its message waits for
        another consumer (the visibility timeout, 30 s, is far off)."""
        hp = harness.free_port()
        m = self.new_member(["--listen-client-http-urls", "http://127.0.0.1:%d" % hp])
        c = m.client()
        c.put("/q/solo/p/only", "v")
        ws = watchlib.WatchStream(watchlib.ready_channel(m))
        ws.create(b"/q/solo/c/worker")
        self.assertTrue(ws.wait_until(lambda s: sum(len(r.events) for _t, r in s.log) >= 1))
        self.assertTrue(wait_until(lambda: scrape(hp)[1].get(("etcdq_queue_in_flight", "solo")) == 1, 5))
        ws.close()
        self.assertTrue(wait_until(lambda: scrape(hp)[1].get(("etcdq_queue_in_flight", "solo")) == 0, 5),
                        scrape(hp)[1])
        _, v = scrape(hp)
        self.assertEqual((v[("etcdq_queue_depth", "solo")], v[("etcdq_queue_delivered_total", "solo")]), (1, 1))
        # A new consumer gets it again, and it is in flight again.
        ws2 = watchlib.WatchStream(watchlib.ready_channel(m))
        self.addCleanup(ws2.close)
        ws2.create(b"/q/solo/c/next")
        self.assertTrue(ws2.wait_until(lambda s: sum(len(r.events) for _t, r in s.log) >= 1))
        self.assertTrue(wait_until(lambda: scrape(hp)[1].get(("etcdq_queue_in_flight", "solo")) == 1, 5))

    def test_health_and_version(self):
        hp = harness.free_port()
        self.new_member(["--listen-client-http-urls", "http://127.0.0.1:%d" % hp])
        body = urllib.request.urlopen("http://127.0.0.1:%d/health" % hp, timeout=10).read()
        self.assertIn(b'"health":"true"', body)
        body = urllib.request.urlopen("http://127.0.0.1:%d/version" % hp, timeout=10).read()
        self.assertIn(b'"etcdcluster"', body)
        text, _ = scrape(hp)
        self.assertIn("etcd_server_has_leader 1", text)


if __name__ == "__main__":
    harness.main()
