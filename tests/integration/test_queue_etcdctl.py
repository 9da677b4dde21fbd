#!/usr/bin/python3
"""Work queues (QUEUES.md) used with etcdctl (3.6) alone: produce with
`put /q/{queue}/p/{tail}`, consume with `watch /q/{queue}/c/{consumer}`, ack
with `del`, redelivery after the visibility timeout, the /queue/ spelling and
consumer-scoped acks, malformed keys refused, plain keys untouched.
etcdq-only (etcd has no queues)."""
import json
import time
import unittest
import uuid

import harness
from queue_util import BAD_CONFIG, MALFORMED, CtlWatch, etcdctl, msg_key


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueEtcdctl(harness.MemberTestCase):
    def setUp(self):
        self.m = self.new_member()

    def ctl(self, *args, **kw):
        return etcdctl(self.m.endpoint, *args, **kw)

    def ok(self, *args):
        p = self.ctl(*args)
        self.assertEqual(p.returncode, 0, "etcdctl %s: %s" % (" ".join(args), p.stderr))
        return p.stdout

    def watch(self, *args):
        return self.track(CtlWatch(self.m.endpoint, *args))

    def revision(self):
        return int(json.loads(self.ok("get", "no-such-key", "-w", "json"))["header"]["revision"])

    def keys_values(self, prefix):
        out = self.ok("get", "--prefix", prefix)
        lines = out.splitlines()
        return list(zip(lines[0::2], lines[1::2]))

    def test_produce_watch_ack_and_redelivery_after_visibility_timeout(self):
        self.assertEqual(self.ok("put", "/q/jobs/config", '{"visibility_timeout": 2}').strip(), "OK")
        self.assertEqual(self.ok("put", "/q/jobs/p/a", "1").strip(), "OK")
        self.assertEqual(self.ok("put", "/q/jobs/p/b", "2").strip(), "OK")
        k1, k2 = msg_key("jobs", 1, "a"), msg_key("jobs", 2, "b")
        self.assertEqual(k1, "/q/jobs/00000000000000000001/a")
        # Inspect: both queued, oldest first, plus the config key.
        self.assertEqual(self.keys_values("/q/jobs/"),
                         [(k1, "1"), (k2, "2"), ("/q/jobs/config", '{"visibility_timeout": 2}')])

        w = self.watch("/q/jobs/c/%s" % uuid.uuid4())
        ev = w.wait_events(2, timeout=10)
        self.assertEqual([e[1:] for e in ev], [("PUT", k1, "1"), ("PUT", k2, "2")])
        first_b = ev[1][0]

        # Ack a: deleted 1.
        self.assertEqual(self.ok("del", k1).strip(), "1")
        self.assertEqual(self.keys_values("/q/jobs/"),
                         [(k2, "2"), ("/q/jobs/config", '{"visibility_timeout": 2}')])

        # b is not acked: it comes back after its visibility timeout (2 s), a does not.
        ev = w.wait_events(3, timeout=10)
        self.assertEqual(ev[2][1:], ("PUT", k2, "2"))
        waited = ev[2][0] - first_b
        self.assertGreater(waited, 1.5, "redelivered %.2f s after the first delivery (timeout 2 s)" % waited)
        self.assertLess(waited, 6.0, "redelivered %.2f s after the first delivery (timeout 2 s)" % waited)

        # Ack b; nothing more arrives and the queue holds only its config.
        self.assertEqual(self.ok("del", k2).strip(), "1")
        time.sleep(3.0)
        events = w.snapshot()
        self.assertEqual(len(events), 3, events)
        self.assertEqual(self.keys_values("/q/jobs/"), [("/q/jobs/config", '{"visibility_timeout": 2}')])
        # An ack of a message already acked deletes nothing and is no error.
        self.assertEqual(self.ok("del", k1).strip(), "0")

    def test_second_consumer_gets_what_the_first_held_when_its_watch_ends(self):
        self.ok("put", "/q/jobs/p/a", "1")
        w1 = self.watch("/q/jobs/c/%s" % uuid.uuid4())
        self.assertEqual(w1.wait_events(1, timeout=10)[0][2], msg_key("jobs", 1, "a"))
        w2 = self.watch("/q/jobs/c/%s" % uuid.uuid4())
        time.sleep(1.0)
        self.assertEqual(w2.snapshot(), [], "delivered to a second consumer while the first holds it")
        w1.close()
        t0 = time.monotonic()
        ev = w2.wait_events(1, timeout=10)
        self.assertEqual(ev[0][1:], ("PUT", msg_key("jobs", 1, "a"), "1"))
        # Well before the default visibility timeout (30 s).
        self.assertLess(ev[0][0] - t0, 5.0)

    def test_malformed_keys_are_refused_and_change_nothing(self):
        self.ok("put", "/q/jobs/p/a", "1")
        before = self.revision()
        for key in ["/q//p/x", "/queue//p/x", "/q/jobs/p/", "/q/jobs/producer/", "/queue/jobs/input/",
                    "/q/jobs/x", "/q/jobs/x/y", "/q/jobs/c/u", "/q/jobs/consumer/u",
                    "/q/jobs/00000000000000000001/a", "/q/jobs/00000000000000000009/z",
                    "/q/jobs", "/q/", "/q/jobs/1/a"]:
            p = self.ctl("put", key, "v")
            self.assertNotEqual(p.returncode, 0, "put %s was taken: %s" % (key, p.stdout))
            self.assertIn("InvalidArgument", p.stderr, key)
            self.assertIn("desc = " + MALFORMED, p.stderr, key)
        self.assertEqual(self.revision(), before)
        self.assertEqual(self.keys_values("/q/"), [(msg_key("jobs", 1, "a"), "1")])

        for value, why in [("not json", "not JSON"), ("[1]", "not a JSON object"),
                           ('{"bogus": 1}', "bogus"), ('{"visibility_timeout": 0}', "visibility_timeout"),
                           ('{"max_deliveries": 0}', "max_deliveries"), ('{"max_in_flight": 1.5}', "max_in_flight")]:
            p = self.ctl("put", "/q/jobs/config", value)
            self.assertNotEqual(p.returncode, 0, "config %s was taken" % value)
            self.assertIn("InvalidArgument", p.stderr, value)
            self.assertIn("desc = " + BAD_CONFIG, p.stderr, value)
            self.assertIn(why, p.stderr, value)
        self.assertEqual(self.revision(), before)

    def test_queue_prefix_spellings_and_consumer_scoped_acks(self):
        self.ok("put", "/queue/jobs/producer/a", "1")
        self.ok("put", "/q/jobs/i/b", "2")
        self.ok("put", "/queue/jobs/input/c", "3")
        self.ok("put", "/q/jobs/p/d/with/slashes", "4")
        k = [msg_key("jobs", 1, "a"), msg_key("jobs", 2, "b"), msg_key("jobs", 3, "c"),
             msg_key("jobs", 4, "d/with/slashes")]
        # Stored under /q/ whatever prefix the producer used.
        self.assertEqual(self.keys_values("/q/jobs/"), list(zip(k, ["1", "2", "3", "4"])))

        consumer = str(uuid.uuid4())
        w = self.watch("/queue/jobs/consumer/%s" % consumer)
        ev = w.wait_events(4, timeout=10)
        self.assertEqual([e[1:] for e in ev], list(zip(["PUT"] * 4, k, ["1", "2", "3", "4"])))

        self.assertEqual(self.ok("del", k[0].replace("/q/", "/queue/", 1)).strip(), "1")
        idx_tail = lambda key: key.split("/", 3)[3]   # noqa: E731
        self.assertEqual(self.ok("del", "/q/jobs/c/%s/%s" % (consumer, idx_tail(k[1]))).strip(), "1")
        self.assertEqual(self.ok("del", "/queue/jobs/consumer/%s/%s" % (consumer, idx_tail(k[2]))).strip(), "1")
        self.assertEqual(self.ok("del", "/q/jobs/consumer/%s/%s" % (consumer, idx_tail(k[3]))).strip(), "1")
        self.assertEqual(self.keys_values("/q/jobs/"), [])
        # Acking again deletes nothing, in any form, and is no error.
        self.assertEqual(self.ok("del", "/q/jobs/c/%s/%s" % (consumer, idx_tail(k[1]))).strip(), "0")
        self.assertEqual(self.ok("del", k[3]).strip(), "0")

    def test_prefix_watch_registers_a_consumer(self):
        self.ok("put", "/q/pw/p/x", "payload")
        w = self.watch("--prefix", "/q/pw/c/%s" % uuid.uuid4())
        self.assertEqual(w.wait_events(1, timeout=10)[0][1:], ("PUT", msg_key("pw", 1, "x"), "payload"))
        w2 = self.watch("--prefix", "/q/pw/c/%s/" % uuid.uuid4())
        self.ok("put", "/q/pw/p/y", "p2")
        # Either consumer may take y; exactly one does.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(w.snapshot()) + len(w2.snapshot()) < 2:
            time.sleep(0.1)
        got = [e[1:] for e in w.snapshot() + w2.snapshot()]
        self.assertEqual(sorted(got), [("PUT", msg_key("pw", 1, "x"), "payload"), ("PUT", msg_key("pw", 2, "y"), "p2")])

    def test_ordinary_watch_on_a_queue_sees_its_keys(self):
        w = self.watch("--prefix", "/q/seen/")
        time.sleep(0.5)
        self.ok("put", "/q/seen/p/a", "1")
        self.assertEqual(w.wait_events(1, timeout=10)[0][1:], ("PUT", msg_key("seen", 1, "a"), "1"))
        self.assertEqual(self.ok("del", msg_key("seen", 1, "a")).strip(), "1")
        self.assertEqual(w.wait_events(2, timeout=10)[1][1:3], ("DELETE", msg_key("seen", 1, "a")))

    def test_plain_keys_outside_queue_space_behave_as_before(self):
        w = self.watch("--prefix", "/plain/")
        time.sleep(0.5)
        for key in ["/plain/a", "/qx/jobs/p/a", "/queues/jobs/p/a", "/q", "/queue", "q/jobs/p/a", "/Q/jobs/p/a"]:
            rev = self.revision()
            self.assertEqual(self.ok("put", key, "v-" + key).strip(), "OK", key)
            self.assertEqual(self.revision(), rev + 1, key)
            self.assertEqual(self.ok("get", key).splitlines(), [key, "v-" + key])
        self.assertEqual(w.wait_events(1, timeout=10)[0][1:], ("PUT", "/plain/a", "v-/plain/a"))
        self.assertEqual(self.ok("del", "/plain/a").strip(), "1")
        self.assertEqual(self.ok("del", "/qx/jobs/p/a").strip(), "1")
        self.assertEqual(self.ok("del", "/plain/a").strip(), "0")
        self.assertEqual(w.wait_events(2, timeout=10)[1][1:3], ("DELETE", "/plain/a"))
        # A watch on an ordinary key outside /q/ never gets queue deliveries.
        self.ok("put", "/q/jobs/p/z", "1")
        time.sleep(1.0)
        self.assertEqual(len(w.snapshot()), 2, w.snapshot())


if __name__ == "__main__":
    harness.main()
