#!/usr/bin/python3
"""Watch through python-etcd3 (Debian's python3-etcd3 0.12), the way applications use it:
watch, watch_prefix, watch_once, watch_response, add_watch_callback / cancel_watch, with
start_revision, prev_kv and filters. Event types, keys, values and revisions are checked
exactly; every expectation was first checked against Debian's etcd 3.4.

python-etcd3 runs one Watch stream per client, read by a thread of its own; its
iterators block until an event comes, so every read here goes through take(), which
gives up after a timeout instead of hanging the test.

    /usr/bin/python3 tests/integration/test_watch_python_etcd3.py [-k pattern]
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_watch_python_etcd3.py
"""
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd3 import events as etcd3_events  # noqa: E402
from etcd3 import exceptions as etcd3_exceptions  # noqa: E402


import harness  # noqa: E402
import watchlib as wl  # noqa: E402

WAIT_S = 10.0
QUIET_S = 0.5


harness.quiet_closed_etcd3_watchers()


def take(iterator, n, timeout=WAIT_S):
    """The first n items of a blocking iterator, read on a helper thread; fails on timeout."""
    out = queue.Queue()

    def pump():
        try:
            for item in iterator:
                out.put(("item", item))
        except Exception as e:  # noqa: BLE001 - handed to the test
            out.put(("error", e))
    threading.Thread(target=pump, daemon=True).start()
    items = []
    deadline = time.monotonic() + timeout
    while len(items) < n:
        try:
            kind, v = out.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError("only %d of %d items within %.0f s: %s" % (len(items), n, timeout, items))
        if kind == "error":
            raise v
        items.append(v)
    return items


def described(e):
    """(class, key, value, create_revision, mod_revision, version) of a python-etcd3 event."""
    return (type(e).__name__, e.key, e.value, e.create_revision, e.mod_revision, e.version)


class PythonEtcd3WatchTest(harness.MemberTestCase):
    """One member for the class; each test has its own keys and takes revisions from
    the write responses, so the tests do not depend on each other's writes."""

    @classmethod
    def setUpClass(cls):
        cls.member = cls.new_class_member()
        wl.ready_channel(cls.member)

    def setUp(self):
        self.etcd = self.member.client()

    def put(self, key, value):
        return self.etcd.put(key, value).header.revision

    def delete(self, key):
        return self.etcd.delete(key, return_response=True).header.revision

    def test_watch_yields_put_and_delete_events_with_exact_revisions_and_versions(self):
        events, cancel = self.etcd.watch("w1/k")
        try:
            r1 = self.put("w1/k", "one")
            r2 = self.put("w1/k", "two")
            r3 = self.delete("w1/k")
            got = take(events, 3)
        finally:
            cancel()
        self.assertEqual([described(e) for e in got], [
            ("PutEvent", b"w1/k", b"one", r1, r1, 1),
            ("PutEvent", b"w1/k", b"two", r1, r2, 2),
            ("DeleteEvent", b"w1/k", b"", 0, r3, 0)])
        self.assertIsInstance(got[0], etcd3_events.PutEvent)
        self.assertIsInstance(got[2], etcd3_events.DeleteEvent)

    def test_watch_of_one_key_ignores_other_keys_including_longer_ones(self):
        events, cancel = self.etcd.watch("w2/k")
        try:
            self.put("w2/k2", "no")
            self.put("w2/j", "no")
            r = self.put("w2/k", "yes")
            (e,) = take(events, 1)
        finally:
            cancel()
        self.assertEqual(described(e), ("PutEvent", b"w2/k", b"yes", r, r, 1))

    def test_watch_prefix_sees_every_key_under_the_prefix_in_revision_order_and_nothing_else(self):
        events, cancel = self.etcd.watch_prefix("w3/")
        try:
            self.put("w3", "outside")            # the prefix without its slash
            r1 = self.put("w3/a", "1")
            self.put("w4/a", "outside")
            t = self.etcd.transactions
            ok, resp = self.etcd.transaction(compare=[], success=[t.put("w3/c", "3"), t.put("w3/b", "2")],
                                             failure=[])
            self.assertTrue(ok)
            r2 = self.etcd.get("w3/c")[1].mod_revision
            r3 = self.delete("w3/a")
            got = take(events, 4)
        finally:
            cancel()
        self.assertEqual([described(e) for e in got], [
            ("PutEvent", b"w3/a", b"1", r1, r1, 1),
            ("PutEvent", b"w3/c", b"3", r2, r2, 1),     # a txn's events share its revision, in op order
            ("PutEvent", b"w3/b", b"2", r2, r2, 1),
            ("DeleteEvent", b"w3/a", b"", 0, r3, 0)])

    def test_watch_response_groups_one_revisions_events_and_carries_its_header_revision(self):
        responses, cancel = self.etcd.watch_prefix_response("w5/")
        try:
            self.put("w5/a", "1")
            self.put("w5/b", "2")
            self.put("w5/c", "3")
            deleted = self.etcd.delete_prefix("w5/")
            (first, second, third, gone) = take(responses, 4)
        finally:
            cancel()
        self.assertEqual(deleted.deleted, 3)
        self.assertEqual([e.key for e in gone.events], [b"w5/a", b"w5/b", b"w5/c"],
                         "a range delete is one response, keys in order")
        self.assertEqual({e.mod_revision for e in gone.events}, {deleted.header.revision})
        self.assertEqual(gone.header.revision, deleted.header.revision)
        self.assertEqual([r.header.revision for r in (first, second, third)],
                         [deleted.header.revision - 3, deleted.header.revision - 2, deleted.header.revision - 1])

    def test_watch_once_returns_the_next_event_on_the_key(self):
        result = {}

        def watcher():
            try:
                result["event"] = self.etcd.watch_once("w6/k", timeout=WAIT_S)
            except Exception as e:  # noqa: BLE001
                result["error"] = e
        t = threading.Thread(target=watcher, daemon=True)
        t.start()
        time.sleep(0.3)   # let the watch be created before the write
        r = self.put("w6/k", "v")
        t.join(WAIT_S + 1)
        self.assertNotIn("error", result)
        self.assertEqual(described(result["event"]), ("PutEvent", b"w6/k", b"v", r, r, 1))

    def test_watch_once_times_out_with_WatchTimedOut_when_nothing_changes(self):
        t0 = time.monotonic()
        with self.assertRaises(etcd3_exceptions.WatchTimedOut):
            self.etcd.watch_once("w7/k", timeout=0.5)
        self.assertLess(time.monotonic() - t0, 5)

    def test_watch_once_with_start_revision_returns_a_past_event_at_once(self):
        r = self.put("w8/k", "past")
        self.put("w8/k", "later")
        e = self.etcd.watch_once("w8/k", timeout=WAIT_S, start_revision=r)
        self.assertEqual(described(e), ("PutEvent", b"w8/k", b"past", r, r, 1))

    def test_add_watch_callback_gets_each_response_and_cancel_watch_stops_them(self):
        got = queue.Queue()
        wid = self.etcd.add_watch_callback("w9/k", got.put)
        r1 = self.put("w9/k", "1")
        first = got.get(timeout=WAIT_S)
        self.assertNotIsInstance(first, Exception)
        self.assertEqual([described(e) for e in first.events], [("PutEvent", b"w9/k", b"1", r1, r1, 1)])
        self.etcd.cancel_watch(wid)
        time.sleep(QUIET_S)     # the cancel request is sent asynchronously
        self.put("w9/k", "2")
        time.sleep(QUIET_S)
        self.assertTrue(got.empty(), "a callback ran after cancel_watch: %r" % (got.queue,))

    def test_two_callbacks_on_one_client_each_see_only_their_key(self):
        a, b = queue.Queue(), queue.Queue()
        wa = self.etcd.add_watch_callback("w10/a", a.put)
        wb = self.etcd.add_watch_callback("w10/b", b.put)
        self.assertNotEqual(wa, wb)
        try:
            ra = self.put("w10/a", "A")
            rb = self.put("w10/b", "B")
            ea = a.get(timeout=WAIT_S).events
            eb = b.get(timeout=WAIT_S).events
        finally:
            self.etcd.cancel_watch(wa)
            self.etcd.cancel_watch(wb)
        self.assertEqual([described(e) for e in ea], [("PutEvent", b"w10/a", b"A", ra, ra, 1)])
        self.assertEqual([described(e) for e in eb], [("PutEvent", b"w10/b", b"B", rb, rb, 1)])

    def test_watch_with_start_revision_replays_the_history_then_follows_new_writes(self):
        r1 = self.put("w11/k", "1")
        r2 = self.put("w11/k", "2")
        r3 = self.delete("w11/k")
        r4 = self.put("w11/k", "3")
        events, cancel = self.etcd.watch("w11/k", start_revision=r2)
        try:
            r5 = self.put("w11/k", "4")
            got = take(events, 4)
        finally:
            cancel()
        self.assertEqual([described(e) for e in got], [
            ("PutEvent", b"w11/k", b"2", r1, r2, 2),
            ("DeleteEvent", b"w11/k", b"", 0, r3, 0),
            ("PutEvent", b"w11/k", b"3", r4, r4, 1),
            ("PutEvent", b"w11/k", b"4", r4, r5, 2)])

    def test_watch_prefix_with_start_revision_sees_only_revisions_from_there(self):
        self.put("w12/a", "1")
        r2 = self.put("w12/b", "2")
        r3 = self.put("w12/a", "3")
        events, cancel = self.etcd.watch_prefix("w12/", start_revision=r2)
        try:
            got = take(events, 2)
            time.sleep(QUIET_S)
        finally:
            cancel()
        self.assertEqual([(e.key, e.mod_revision) for e in got], [(b"w12/b", r2), (b"w12/a", r3)])

    def test_watch_with_prev_kv_carries_the_previous_value_of_puts_and_deletes(self):
        events, cancel = self.etcd.watch("w13/k", prev_kv=True)
        try:
            r1 = self.put("w13/k", "one")
            r2 = self.put("w13/k", "two")
            self.delete("w13/k")
            got = take(events, 3)
        finally:
            cancel()
        self.assertFalse(got[0]._event.HasField("prev_kv"), "a created key has no previous value")
        self.assertEqual((got[1].prev_value, got[1].prev_mod_revision, got[1].prev_version), (b"one", r1, 1))
        self.assertEqual((got[2].prev_value, got[2].prev_mod_revision, got[2].prev_version,
                          got[2].prev_create_revision), (b"two", r2, 2, r1))
        self.assertEqual(got[2].value, b"")

    def test_watch_without_prev_kv_has_no_previous_value(self):
        events, cancel = self.etcd.watch("w14/k")
        try:
            self.put("w14/k", "one")
            self.put("w14/k", "two")
            got = take(events, 2)
        finally:
            cancel()
        self.assertFalse(got[1]._event.HasField("prev_kv"))

    # No filters test here: python-etcd3 0.12 assigns a list to the repeated field
    # `filters`, which Debian's protobuf 4 refuses (AttributeError) before anything is
    # sent. test_watch_protocol.py covers NOPUT/NODELETE over raw gRPC.


class PythonEtcd3CompactionTest(harness.MemberTestCase):
    def setUp(self):
        self.member = self.new_member()
        wl.ready_channel(self.member)
        self.etcd = self.member.client()

    def test_watch_from_a_compacted_revision_raises_RevisionCompactedError_with_the_compaction(self):
        revs = [self.etcd.put("k", str(i)).header.revision for i in range(5)]
        self.etcd.compact(revs[3], physical=True)
        events, cancel = self.etcd.watch("k", start_revision=revs[0])
        try:
            with self.assertRaises(etcd3_exceptions.RevisionCompactedError) as ctx:
                take(events, 1)
        finally:
            cancel()
        self.assertEqual(ctx.exception.compacted_revision, revs[3])

    def test_watch_from_the_compaction_revision_gets_the_events_from_there(self):
        revs = [self.etcd.put("k", str(i)).header.revision for i in range(5)]
        self.etcd.compact(revs[3], physical=True)
        events, cancel = self.etcd.watch("k", start_revision=revs[3])
        try:
            got = take(events, 2)
        finally:
            cancel()
        self.assertEqual([(e.value, e.mod_revision) for e in got], [(b"3", revs[3]), (b"4", revs[4])])


if __name__ == "__main__":
    harness.main()
