#!/usr/bin/python3
"""The Watch stream's protocol, request by request, over raw gRPC (watchlib).

WatchCreateRequest (auto and client-chosen watch ids, duplicates, empty ranges,
filters, start revisions, prev_kv, fragment), WatchCancelRequest, WatchProgressRequest,
progress_notify with --experimental-watch-progress-notify-interval, and the answers
around compaction. Every expectation was checked against Debian's etcd 3.4 first;
where etcdq promises something etcd does not do, the test says so and runs only
against etcdq.

    /usr/bin/python3 tests/integration/test_watch_protocol.py [-k pattern]
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_watch_protocol.py
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import harness  # noqa: E402
import watchlib as wl  # noqa: E402

WAIT_S = 10.0
QUIET_S = 0.5   # how long "nothing more arrives" is watched for


def ev(e):
    """(type, key, value, create, mod, version) of an event."""
    kv = e.kv
    return ("PUT" if e.type == wl.PUT else "DELETE", kv.key, kv.value, kv.create_revision,
            kv.mod_revision, kv.version)


def prev(e):
    if not e.HasField("prev_kv"):
        return None
    p = e.prev_kv
    return (p.key, p.value, p.create_revision, p.mod_revision, p.version)


class WatchTestCase(harness.MemberTestCase):
    def stream(self, member=None, name=None):
        m = member or self.member
        return wl.WatchStream(wl.ready_channel(m), name=name or self.id().split(".")[-1])

    def kv_of(self, member):
        return member.kv(wl.ready_channel(member))

    def put(self, key, value, kv=None):
        return (kv or self.kv).Put(pb.PutRequest(key=key, value=value), timeout=WAIT_S).header.revision

    def delete(self, key, range_end=b"", kv=None):
        return (kv or self.kv).DeleteRange(pb.DeleteRangeRequest(key=key, range_end=range_end),
                                           timeout=WAIT_S).header.revision

    def current(self, kv=None):
        return (kv or self.kv).Range(pb.RangeRequest(key=b"-"), timeout=WAIT_S).header.revision

    def created(self, ws, count=1):
        return ws.wait_created(count, WAIT_S)

    def wait_events(self, ws, watch_id, n):
        ws.wait_until(lambda s: len(s.events_of(watch_id)) >= n, WAIT_S)
        time.sleep(QUIET_S if n == 0 else 0.05)
        got = ws.events_of(watch_id)
        self.assertEqual(len(got), n, "watch %d: %d events, wanted %d: %s" % (
            watch_id, len(got), n, [ev(e) for e in got]))
        return got

    def assert_nothing_more(self, ws, index):
        time.sleep(QUIET_S)
        extra = ws.responses()[index:]
        self.assertEqual(extra, [], "unexpected responses: %s" % extra)


class WatchCreateAndEventsTest(WatchTestCase):
    """One member shared by the class; each test uses its own keys and relative revisions."""

    @classmethod
    def setUpClass(cls):
        cls.member = cls.new_class_member()
        cls.kv = cls.member.kv(wl.ready_channel(cls.member))

    def test_created_comes_first_with_the_current_revision_in_its_header(self):
        rev = self.put(b"c1/k", b"v")
        ws = self.stream()
        ws.create(b"c1/k")
        (c,) = self.created(ws)
        self.assertEqual(ws.responses()[0], c)
        self.assertEqual((c.created, c.canceled, c.compact_revision, c.cancel_reason, list(c.events)),
                         (True, False, 0, "", []))
        self.assertEqual(c.header.revision, rev)
        self.assertNotEqual(c.header.cluster_id, 0)

    def test_put_events_carry_the_full_key_value_and_delete_events_only_key_and_mod_revision(self):
        ws = self.stream()
        ws.create(b"c2/k")
        (c,) = self.created(ws)
        r1 = self.put(b"c2/k", b"one")
        r2 = self.put(b"c2/k", b"two")
        r3 = self.delete(b"c2/k")
        got = self.wait_events(ws, c.watch_id, 3)
        self.assertEqual([ev(e) for e in got], [
            ("PUT", b"c2/k", b"one", r1, r1, 1),
            ("PUT", b"c2/k", b"two", r1, r2, 2),
            ("DELETE", b"c2/k", b"", 0, r3, 0)])
        self.assertEqual([prev(e) for e in got], [None, None, None], "prev_kv was not asked for")
        self.assertEqual([e.kv.lease for e in got], [0, 0, 0])
        resps = [r for r in ws.responses() if r.events]
        self.assertEqual([r.header.revision for r in resps], [r1, r2, r3],
                         "a synced watcher's response header carries its events' revision")

    def test_prev_kv_carries_the_version_before_each_put_and_delete(self):
        ws = self.stream()
        ws.create(b"c3/k", prev_kv=True)
        (c,) = self.created(ws)
        r1 = self.put(b"c3/k", b"one")
        r2 = self.put(b"c3/k", b"two")
        self.delete(b"c3/k")
        r4 = self.put(b"c3/k", b"three")
        got = self.wait_events(ws, c.watch_id, 4)
        self.assertEqual([prev(e) for e in got], [
            None,
            (b"c3/k", b"one", r1, r1, 1),
            (b"c3/k", b"two", r1, r2, 2),
            None])   # recreated: nothing live before it
        self.assertEqual(ev(got[3]), ("PUT", b"c3/k", b"three", r4, r4, 1))

    def test_client_chosen_watch_id_is_echoed_in_created_and_events(self):
        ws = self.stream()
        ws.create(b"c4/k", watch_id=42)
        (c,) = self.created(ws)
        self.assertEqual(c.watch_id, 42)
        self.put(b"c4/k", b"v")
        got = ws.wait_for(lambda r: r.events)
        self.assertIsNotNone(got)
        self.assertEqual(got.watch_id, 42)

    def test_duplicate_client_watch_id_on_one_stream_is_created_and_canceled_with_a_duplicate_reason(self):
        ws = self.stream()
        ws.create(b"c5/a", watch_id=7)
        ws.create(b"c5/b", watch_id=7)
        first, second = self.created(ws, 2)
        self.assertEqual((first.watch_id, first.canceled), (7, False))
        # etcd 3.4 and 3.5: created and canceled at once, watch_id -1, mvcc's error text.
        self.assertEqual((second.watch_id, second.created, second.canceled), (-1, True, True))
        self.assertIn("duplicate", second.cancel_reason)
        self.assertEqual(second.cancel_reason, "mvcc: duplicate watch ID provided on the WatchStream")
        # The first watch is untouched and the second key is not watched.
        self.put(b"c5/b", b"x")
        r = self.put(b"c5/a", b"y")
        got = self.wait_events(ws, 7, 1)
        self.assertEqual(ev(got[0])[1:5], (b"c5/a", b"y", r, r))

    def test_the_same_client_watch_id_on_two_streams_makes_two_independent_watches(self):
        a, b = self.stream(name="a"), self.stream(name="b")
        a.create(b"c6/a", watch_id=3)
        b.create(b"c6/b", watch_id=3)
        self.assertFalse(self.created(a)[0].canceled)
        self.assertFalse(self.created(b)[0].canceled)
        self.put(b"c6/a", b"1")
        self.put(b"c6/b", b"2")
        self.assertEqual([e.kv.key for e in self.wait_events(a, 3, 1)], [b"c6/a"])
        self.assertEqual([e.kv.key for e in self.wait_events(b, 3, 1)], [b"c6/b"])

    def test_auto_assigned_watch_ids_start_at_0_and_skip_ids_the_client_chose(self):
        ws = self.stream()
        ws.create(b"c7/a", watch_id=1)
        ws.create(b"c7/b")
        ws.create(b"c7/c")
        self.assertEqual([c.watch_id for c in self.created(ws, 3)], [1, 0, 2])

    def test_watch_with_key_not_below_range_end_is_created_and_canceled_as_an_empty_range(self):
        ws = self.stream()
        ws.create(b"c8/z", range_end=b"c8/a")
        (c,) = self.created(ws)
        self.assertEqual((c.watch_id, c.created, c.canceled, c.cancel_reason),
                         (-1, True, True, "mvcc: watcher range is empty"))

    def test_a_rejected_create_does_not_use_up_an_auto_watch_id(self):
        # etcd checks the range before it picks an id (mvcc/watcher.go); etcdq takes the
        # next id first, so the following watch gets 1 instead of 0.
        ws = self.stream()
        ws.create(b"c9/z", range_end=b"c9/a")   # rejected
        ws.create(b"c9/k")
        rejected, ok = self.created(ws, 2)
        self.assertTrue(rejected.canceled)
        self.assertEqual((ok.watch_id, ok.canceled), (0, False))

    def test_cancel_request_is_confirmed_with_a_canceled_response_and_stops_the_events(self):
        ws = self.stream()
        ws.create(b"c10/k")
        (c,) = self.created(ws)
        self.put(b"c10/k", b"1")
        self.wait_events(ws, c.watch_id, 1)
        ws.cancel(c.watch_id)
        conf = ws.wait_for(lambda r: r.canceled)
        self.assertIsNotNone(conf, "no canceled response to a WatchCancelRequest")
        self.assertEqual((conf.watch_id, conf.created, conf.compact_revision, list(conf.events)),
                         (c.watch_id, False, 0, []))
        self.assertEqual(conf.header.revision, self.current())
        n = len(ws.log)
        self.put(b"c10/k", b"2")
        self.assert_nothing_more(ws, n)

    def test_cancel_of_an_unknown_watch_id_is_answered_with_nothing(self):
        ws = self.stream()
        ws.create(b"c11/k")
        self.created(ws)
        n = len(ws.log)
        ws.cancel(12345)
        ws.request_progress()   # answered in order after whatever the cancel produced
        p = ws.wait_for(lambda r: r.watch_id == -1, start=n)
        self.assertIsNotNone(p, "no progress response")
        self.assertEqual(ws.responses()[n:], [p])

    def test_progress_request_is_answered_with_watch_id_minus_1_and_the_current_revision(self):
        ws = self.stream()
        ws.create(b"c12/k")
        ws.create(b"c12/", range_end=wl.prefix_end(b"c12/"))
        self.created(ws, 2)
        self.put(b"c12/k", b"1")
        self.wait_events(ws, 0, 1)
        rev = self.put(b"c12/other", b"2")
        n = len(ws.log)
        ws.request_progress()
        p = ws.wait_for(lambda r: r.watch_id == -1 and not r.created, start=n)
        self.assertIsNotNone(p, "no progress response within %.0f s" % WAIT_S)
        self.assertEqual((p.created, p.canceled, list(p.events)), (False, False, []))
        self.assertEqual(p.header.revision, rev)

    def test_progress_request_on_a_stream_without_watchers_gets_no_answer(self):
        # etcd 3.6 sends its answer through one of the stream's watchers
        # (watchable_store.go progressIfSync): none, no answer (3.4 answered).
        rev = self.put(b"c13/k", b"1")
        ws = self.stream()
        ws.request_progress()
        time.sleep(1.0)
        self.assertEqual(ws.responses(), [])
        ws.create(b"c13/k")
        self.created(ws)
        n = len(ws.log)
        ws.request_progress()
        p = ws.wait_for(lambda r: r.watch_id == -1 and not r.created, start=n)
        self.assertIsNotNone(p, "no progress response once the stream has a watcher")
        self.assertEqual(p.header.revision, rev)

    def test_a_progress_request_while_a_watcher_catches_up_is_answered_only_after_its_events(self):
        # etcd 3.6 answers only while every watcher of the stream is synced,
        # and drops the request otherwise (3.4 answered at once, 3.5.8
        # deferred the answer); the client asks again.
        value = b"v" * (100 << 10)
        revs = [self.put(b"c30/k", value) for _ in range(300)]  # 30 MiB: more than the stream and sockets hold
        gate = threading.Event()
        ws = wl.WatchStream(wl.ready_channel(self.member), name="c30",
                            on_response=lambda s, t, r: gate.wait(30))  # reads nothing until the gate opens
        try:
            ws.create(b"c30/k", start_revision=revs[0])
            time.sleep(1.0)  # the server's queue for the stream fills; the watcher waits in catch-up
            ws.request_progress()
            time.sleep(0.5)
            gate.set()
            self.assertIsNotNone(ws.wait_for(lambda r: r.created), "no created response")
            created = [r for r in ws.responses() if r.created]
            ws.wait_until(lambda s: len(s.events_of(created[0].watch_id)) >= len(revs), WAIT_S * 2)
            self.assertEqual([e.kv.mod_revision for e in ws.events_of(created[0].watch_id)], revs)
            time.sleep(0.5)
            is_progress = lambda r: r.watch_id == -1 and not r.created and not r.canceled  # noqa: E731
            # Whether the first request is answered depends on whether the
            # server counted the watcher as synced then (etcd 3.6 does once
            # its catch-up batch is in the stream's channel, before the
            # client read it; etcdq only once the stream took the events),
            # but an answer never comes before the events it vouches for.
            log = ws.responses()
            for i, r in enumerate(log):
                if is_progress(r):
                    sent = max([e.kv.mod_revision for q in log[:i] for e in q.events] or [0])
                    self.assertGreaterEqual(r.header.revision, revs[-1])
                    self.assertEqual(sent, revs[-1], "a progress answer came before events below its revision")
            n = len(ws.log)
            ws.request_progress()
            p = ws.wait_for(is_progress, start=n)
            self.assertIsNotNone(p, "no answer to a progress request once the watcher is synced")
            self.assertEqual(list(p.events), [])
            self.assertEqual(p.header.revision, revs[-1])
            log = ws.responses()
            self.assertGreater(log.index(p), max(i for i, r in enumerate(log) if r.events))
        finally:
            gate.set()
            ws.close()

    def test_a_progress_answer_never_names_a_revision_below_an_event_already_sent(self):
        # A watcher that caught up into the moment between a revision becoming
        # readable and its publication to the watch hub was ahead of the hub,
        # and the progress answer (the hub's revision) went one below an event
        # the stream had sent: 10 of 200 streams here before the fix.
        stop = threading.Event()

        def writer():
            i = 0
            while not stop.is_set():
                self.put(b"c31/k", (b"v%d" % i) * (1 if i % 2 else 20000))
                i += 1

        writers = [threading.Thread(target=writer, daemon=True) for _ in range(2)]
        for t in writers:
            t.start()
        bad = []
        try:
            time.sleep(0.3)
            channel = wl.ready_channel(self.member)
            for _ in range(300):
                ws = wl.WatchStream(channel, name="c31")
                try:
                    ws.create(b"c31/k", start_revision=max(1, self.current() - 30))
                    # Asked every 50 ms until answered, as kube-apiserver's
                    # progress requester does: a request made while the
                    # watcher catches up is dropped (etcd 3.6).
                    at = None
                    deadline = time.time() + WAIT_S
                    while at is None and time.time() < deadline:
                        ws.request_progress()
                        at = ws.wait_until(lambda s: next((i for i, (_, r) in enumerate(s.log)
                                                           if r.watch_id == -1 and not r.created and not r.canceled),
                                                          None), timeout=0.05)
                    self.assertIsNotNone(at, "no answer to the progress request")
                    log = ws.responses()
                    sent = max([e.kv.mod_revision for r in log[:at] for e in r.events] or [0])
                    if log[at].header.revision < sent:
                        bad.append((log[at].header.revision, sent))
                finally:
                    ws.close()
        finally:
            stop.set()
            for t in writers:
                t.join()
        self.assertEqual(bad, [], "progress revision below an event already sent (answer, event)")

    def test_events_of_one_txn_arrive_in_one_response_in_the_txns_op_order(self):
        ws = self.stream()
        ws.create(b"c14/", range_end=wl.prefix_end(b"c14/"))
        (c,) = self.created(ws)
        t = pb.TxnRequest(success=[pb.RequestOp(request_put=pb.PutRequest(key=k, value=b"v"))
                                   for k in (b"c14/z", b"c14/a", b"c14/m")])
        rev = self.kv.Txn(t, timeout=WAIT_S).header.revision
        got = self.wait_events(ws, c.watch_id, 3)
        self.assertEqual([(e.kv.key, e.kv.mod_revision) for e in got],
                         [(b"c14/z", rev), (b"c14/a", rev), (b"c14/m", rev)])
        self.assertEqual(len([r for r in ws.responses() if r.events]), 1, "one revision, one response")

    def test_deleting_a_range_of_keys_is_one_response_in_key_order(self):
        for k in (b"c15/b", b"c15/c", b"c15/a"):
            self.put(k, b"v")
        ws = self.stream()
        ws.create(b"c15/", range_end=wl.prefix_end(b"c15/"), prev_kv=True)
        (c,) = self.created(ws)
        rev = self.delete(b"c15/", wl.prefix_end(b"c15/"))
        got = self.wait_events(ws, c.watch_id, 3)
        self.assertEqual([(ev(e)[0], e.kv.key, e.kv.mod_revision, prev(e)[1]) for e in got],
                         [("DELETE", b"c15/a", rev, b"v"), ("DELETE", b"c15/b", rev, b"v"),
                          ("DELETE", b"c15/c", rev, b"v")])
        self.assertEqual(len([r for r in ws.responses() if r.events]), 1)

    def test_noput_filter_drops_puts_and_nodelete_filter_drops_deletes(self):
        ws = self.stream()
        ws.create(b"c16/k", filters=[wl.NOPUT])
        ws.create(b"c16/k", filters=[wl.NODELETE])
        no_put, no_delete = self.created(ws, 2)
        r1 = self.put(b"c16/k", b"1")
        r2 = self.delete(b"c16/k")
        r3 = self.put(b"c16/k", b"2")
        self.assertEqual([(ev(e)[0], e.kv.mod_revision) for e in self.wait_events(ws, no_put.watch_id, 1)],
                         [("DELETE", r2)])
        self.assertEqual([(ev(e)[0], e.kv.mod_revision) for e in self.wait_events(ws, no_delete.watch_id, 2)],
                         [("PUT", r1), ("PUT", r3)])
        self.assertFalse([r for r in ws.responses() if not r.created and not r.events],
                         "a revision whose events were all filtered out gives no (empty) response")

    def test_watch_starting_at_a_future_revision_skips_the_revisions_before_it(self):
        cur = self.current()
        ws = self.stream()
        ws.create(b"c17/k", start_revision=cur + 3)
        (c,) = self.created(ws)
        revs = [self.put(b"c17/k", b"%d" % i) for i in range(4)]
        self.assertEqual(revs[0], cur + 1, "another test wrote to the shared member meanwhile")
        got = self.wait_events(ws, c.watch_id, 2)
        self.assertEqual([e.kv.mod_revision for e in got], [cur + 3, cur + 4])

    def test_watch_from_a_past_revision_replays_history_then_follows_new_writes(self):
        r1 = self.put(b"c18/k", b"1")
        r2 = self.put(b"c18/k", b"2")
        ws = self.stream()
        ws.create(b"c18/k", start_revision=r1, prev_kv=True)
        (c,) = self.created(ws)
        r3 = self.put(b"c18/k", b"3")
        got = self.wait_events(ws, c.watch_id, 3)
        self.assertEqual([(e.kv.mod_revision, e.kv.value, prev(e) and prev(e)[1]) for e in got],
                         [(r1, b"1", None), (r2, b"2", b"1"), (r3, b"3", b"2")])

    def test_from_key_watch_sees_the_key_and_every_key_after_it(self):
        ws = self.stream()
        ws.create(b"c19/m", range_end=wl.FROM_KEY)
        (c,) = self.created(ws)
        for k in (b"c19/a", b"c19/m", b"c19/z", b"c2"):
            self.put(k, b"v")
        # "c2" sorts after "c19/..." too; other tests' keys may also show up: filter ours.
        time.sleep(QUIET_S)
        keys = [e.kv.key for e in ws.events_of(c.watch_id) if e.kv.key.startswith((b"c19/", b"c2"))]
        self.assertEqual(keys, [b"c19/m", b"c19/z", b"c2"])


class WatchFragmentTest(WatchTestCase):
    """fragment=True splits a response bigger than the server's limit into parts, the last
    with fragment false. etcd's limit is --max-request-bytes plus its 512 KiB gRPC
    overhead allowance (v3rpc/watch.go: maxRequestBytes + grpcOverheadBytes)."""
    MAX_REQUEST_BYTES = 64 * 1024
    LIMIT = MAX_REQUEST_BYTES + 512 * 1024

    def setUp(self):
        self.member = self.new_member(extra_args=["--max-request-bytes", str(self.MAX_REQUEST_BYTES)])
        self.kv = self.kv_of(self.member)

    def test_catch_up_response_over_the_limit_is_fragmented_only_for_a_watch_that_asked(self):
        keys = [b"f/%02d" % i for i in range(16)]
        revs = [self.put(k, k * 12000) for k in keys]       # 16 x 60 KB: one ~960 KB catch-up response
        ws = self.stream()
        ws.create(b"f/", range_end=wl.prefix_end(b"f/"), start_revision=revs[0], fragment=True)
        ws.create(b"f/", range_end=wl.prefix_end(b"f/"), start_revision=revs[0])
        frag, whole = self.created(ws, 2)
        self.wait_events(ws, frag.watch_id, 16)
        self.wait_events(ws, whole.watch_id, 16)
        parts = [r for r in ws.responses() if r.watch_id == frag.watch_id and r.events]
        self.assertGreaterEqual(len(parts), 2, "expected fragments of a %d-byte response" % (16 * 60000))
        self.assertTrue(any(r.fragment for r in parts))
        self.assertFalse(parts[-1].fragment, "the last part ends the fragmented response")
        self.assertEqual([(e.kv.key, e.kv.mod_revision, e.kv.value) for r in parts for e in r.events],
                         [(k, r, k * 12000) for k, r in zip(keys, revs)])
        for r in parts:
            self.assertLessEqual(r.ByteSize(), self.LIMIT, "a fragment over the limit")
        others = [r for r in ws.responses() if r.watch_id == whole.watch_id and r.events]
        self.assertFalse(any(r.fragment for r in others), "fragment set for a watch that did not ask")
        self.assertEqual([(e.kv.key, e.kv.mod_revision) for r in others for e in r.events],
                         list(zip(keys, revs)))

    def test_response_over_max_request_bytes_but_within_the_grpc_allowance_is_not_fragmented(self):
        ws = self.stream()
        ws.create(b"g/", range_end=wl.prefix_end(b"g/"), prev_kv=True, fragment=True)
        (c,) = self.created(ws)
        keys = [b"g/%d" % i for i in range(3)]

        def txn(fill):
            return pb.TxnRequest(success=[pb.RequestOp(request_put=pb.PutRequest(key=k, value=fill * 20000))
                                          for k in keys])
        self.kv.Txn(txn(b"a"), timeout=WAIT_S)
        rev = self.kv.Txn(txn(b"b"), timeout=WAIT_S).header.revision   # with prev_kv: ~120 KB
        self.wait_events(ws, c.watch_id, 6)
        parts = [r for r in ws.responses() if r.events and r.events[0].kv.mod_revision == rev]
        total = sum(r.ByteSize() for r in parts)
        self.assertGreater(total, self.MAX_REQUEST_BYTES)
        self.assertEqual([(len(r.events), r.fragment) for r in parts], [(3, False)],
                         "a %d-byte response (max-request-bytes %d) came in %d parts of %s bytes; etcd "
                         "fragments only above max-request-bytes + 512 KiB" % (
                             total, self.MAX_REQUEST_BYTES, len(parts), [r.ByteSize() for r in parts]))


class WatchCompactionTest(WatchTestCase):
    """Each test on a fresh member: absolute revisions."""

    def setUp(self):
        self.member = self.new_member()
        self.kv = self.kv_of(self.member)

    def compact(self, rev):
        self.kv.Compact(pb.CompactionRequest(revision=rev, physical=True), timeout=WAIT_S)

    def test_watch_starting_below_the_compaction_is_created_then_canceled_with_compact_revision(self):
        for i in range(5):
            self.put(b"k", b"%d" % i)                 # revisions 2..6
        self.compact(5)
        ws = self.stream()
        ws.create(b"k", start_revision=3)
        (c,) = self.created(ws)
        self.assertFalse(c.canceled)
        end = ws.wait_for(lambda r: r.canceled)
        self.assertIsNotNone(end, "no canceled response")
        self.assertEqual((end.watch_id, end.compact_revision, list(end.events)), (c.watch_id, 5, []))
        self.assertEqual(ws.events_of(c.watch_id), [], "events below a compaction must not be sent")

    def test_watch_starting_at_the_compaction_revision_gets_the_put_at_that_revision(self):
        for i in range(5):
            self.put(b"k", b"%d" % i)                 # revisions 2..6
        self.compact(5)
        ws = self.stream()
        ws.create(b"k", start_revision=5)
        (c,) = self.created(ws)
        got = self.wait_events(ws, c.watch_id, 2)
        self.assertEqual([(e.kv.mod_revision, e.kv.value) for e in got], [(5, b"3"), (6, b"4")])
        self.assertFalse(any(r.canceled for r in ws.responses()))

    def test_a_caught_up_watch_keeps_going_across_compactions(self):
        ws = self.stream()
        ws.create(b"k", prev_kv=True)
        ws.create(b"k", start_revision=1)
        now, past = self.created(ws, 2)
        revs = [self.put(b"k", b"%d" % i) for i in range(4)]
        self.wait_events(ws, past.watch_id, 4)
        self.compact(revs[-1])
        revs.append(self.put(b"k", b"last"))
        for w in (now, past):
            got = self.wait_events(ws, w.watch_id, 5)
            self.assertEqual([e.kv.mod_revision for e in got], revs)
        self.assertEqual(prev(ws.events_of(now.watch_id)[-1])[1], b"3")
        self.assertFalse(any(r.canceled for r in ws.responses()))

    def test_prev_kv_is_absent_for_a_key_recreated_after_its_tombstone_was_compacted(self):
        # A key's old version survives compaction 3 (newest at or below it); the key is
        # deleted, compaction 5 removes the tombstone, the key is put again. The put at 6
        # creates the key (version 1): there is no previous version to report, and a
        # Range at 5 must not see the key either.
        self.put(b"a", b"old")                                   # 2
        self.put(b"z", b"1")                                     # 3
        self.compact(3)
        self.delete(b"a")                                        # 4
        self.put(b"z", b"2")                                     # 5
        self.compact(5)
        self.put(b"a", b"new")                                   # 6
        ws = self.stream()
        ws.create(b"a", start_revision=5, prev_kv=True)
        (c,) = self.created(ws)
        (e,) = self.wait_events(ws, c.watch_id, 1)
        self.assertEqual(ev(e), ("PUT", b"a", b"new", 6, 6, 1))
        self.assertIsNone(prev(e), "prev_kv of a create must be empty; got a version from before the "
                                   "compacted delete")
        old = self.kv.Range(pb.RangeRequest(key=b"a", revision=5), timeout=WAIT_S)
        self.assertEqual([(kv.key, kv.value) for kv in old.kvs], [], "Range at 5 returns a deleted key")


class ProgressNotifyTest(WatchTestCase):
    INTERVAL_S = 1.0

    def setUp(self):
        self.member = self.new_member(extra_args=["--experimental-watch-progress-notify-interval", "1s"])
        self.kv = self.kv_of(self.member)

    def test_progress_notify_watch_gets_an_empty_response_with_the_current_revision_every_interval(self):
        rev = self.put(b"other", b"1")
        ws = self.stream()
        ws.create(b"k", progress_notify=True)
        ws.create(b"k2")
        notified, quiet = self.created(ws, 2)
        t0 = time.monotonic()
        time.sleep(3.6 * self.INTERVAL_S)
        progress = [(t, r) for t, r in ws.log if not r.created and not r.events]
        self.assertTrue(all(r.watch_id == notified.watch_id for _, r in progress),
                        "only the watch that asked gets progress: %s" % [r.watch_id for _, r in progress])
        self.assertGreaterEqual(len(progress), 2, "%d progress responses in %.1f s with a 1 s interval" % (
            len(progress), time.monotonic() - t0))
        self.assertLessEqual(len(progress), 5)
        for _, r in progress:
            self.assertEqual((r.canceled, r.compact_revision, r.header.revision), (False, 0, rev))
        # A write moves the revision the next notification reports.
        rev2 = self.put(b"other", b"2")
        n = len(ws.log)
        later = ws.wait_for(lambda r: not r.events and not r.created, timeout=3 * self.INTERVAL_S, start=n)
        self.assertIsNotNone(later, "progress stopped after a write")
        self.assertEqual(later.header.revision, rev2)


if __name__ == "__main__":
    harness.main()
